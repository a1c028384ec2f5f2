"""Which failures mean "the database cannot be reached" (503), and which are bugs or bad input."""

from __future__ import annotations

import errno
import socket

import asyncpg
import pytest

from app.errors import DatabaseUnavailable, database_unavailable


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.CrashShutdownError("terminating connection because of crash of another server process"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.InterfaceError("cannot call Connection.fetch(): connection is closed"),
        asyncpg.InterfaceError("pool is closing"),
        # a pooled connection the server closed, which asyncpg released by itself
        asyncpg.InterfaceError(
            "cannot call Connection.fetch(): connection has been released back to the pool"
        ),
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"),
        ConnectionResetError(errno.ECONNRESET, "reset by peer"),
        OSError(errno.EHOSTUNREACH, "No route to host"),
        OSError("Multiple exceptions: [Errno 111] Connect call failed, [Errno 99] Cannot assign"),
        socket.gaierror(-2, "Name or service not known"),
        DatabaseUnavailable(),
    ],
)
def test_connection_class_failures(exc: BaseException) -> None:
    assert database_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.UndefinedTableError("relation does not exist"),
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        FileNotFoundError(errno.ENOENT, "No such file"),
        PermissionError(errno.EACCES, "Permission denied"),
        OSError(errno.ENOSPC, "No space left on device"),
        TimeoutError(),
        ValueError("bad"),
    ],
)
def test_other_failures_are_not(exc: BaseException) -> None:
    assert not database_unavailable(exc)
