"""dlm for Python: a client for the dlm lock server (protocol dlm.v1), standard library only.

    from dlm import Client

    with Client("ws://127.0.0.1:7070") as client:
        with client.lock("reports", ttl_ms=10_000, wait_ms=5_000) as lease:
            write_report(fencing_token=lease.token)
"""

from .client import Client, LockHolder, LockInfo, ReadWriteLock, Semaphore
from .errors import ERROR_CODES, DlmError
from .lease import Lease, LeaseGroup
from .watch import LockChange, Watch

__all__ = ["ERROR_CODES", "Client", "DlmError", "Lease", "LeaseGroup", "LockChange", "LockHolder",
           "LockInfo", "ReadWriteLock", "Semaphore", "Watch"]
__version__ = "0.1.0"
