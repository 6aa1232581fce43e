import { Value } from '@sinclair/typebox/value';
import {
  ErrorObject,
  type MethodName,
  Methods,
  type NotificationName,
  Notifications,
} from './schemas.js';

/**
 * Checks a message body against the protocol's schema: a method's `params` or `result`, a
 * notification's `params`, or an error object. For tests and transcript runners; the server
 * validates requests with `@dlm/core`'s validation.
 */
export function conforms(
  what:
    | { params: MethodName }
    | { result: MethodName }
    | { notification: NotificationName }
    | { error: true },
  value: unknown,
): boolean {
  if ('params' in what) return Value.Check(Methods[what.params].params, value);
  if ('result' in what) return Value.Check(Methods[what.result].result, value);
  if ('notification' in what) return Value.Check(Notifications[what.notification], value);
  return Value.Check(ErrorObject, value);
}
