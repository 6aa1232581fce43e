import ts from 'typescript';

/** Where an object literal is made by a leading spread and then given more (file:line). */
export interface SpreadFirst {
  file: string;
  line: number;
  text: string;
}

/**
 * The object literals in `source`'s functions that start with a spread and go on with anything
 * after it: `{ ...base, field }`, `{ ...a, ...b }`. V8 in Node 20 copies such a literal's spread by cloning
 * the source's hidden class and then gives every object made there a hidden class of its own as
 * the fields are added (no transition is shared), so each costs ~0.8 µs a field and every
 * property read that later meets those objects goes megamorphic. `Object.assign({}, base,
 * { field })` keeps the same result, in the same key order, on shared hidden classes; a literal
 * that starts with a field (`{ field, ...rest }`) is fine too when `rest` cannot hold `field`.
 */
export function spreadFirstLiterals(file: string, source: string): SpreadFirst[] {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: SpreadFirst[] = [];
  const visit = (node: ts.Node): void => {
    if (isSpreadFirst(node)) {
      const { line } = tree.getLineAndCharacterOfPosition(node.getStart(tree));
      found.push({ file, line: line + 1, text: node.getText(tree).split('\n')[0] ?? '' });
    }
    ts.forEachChild(node, visit);
  };
  visit(tree);
  return found;
}

function isSpreadFirst(node: ts.Node): boolean {
  if (!ts.isObjectLiteralExpression(node) || node.properties.length < 2) return false;
  const [first] = node.properties;
  return first !== undefined && ts.isSpreadAssignment(first) && inFunction(node);
}

/** Made each time a function runs, not once as the module loads (a constant's table is fine). */
function inFunction(node: ts.Node): boolean {
  for (let up = node.parent; up; up = up.parent) if (ts.isFunctionLike(up)) return true;
  return false;
}
