"""Whether a Dask scheduler answers at an address, before distributed's client tries.

A Dask scheduler sends its handshake as soon as a connection opens; a server
of another kind (the dashboard's HTTP port, say) waits for a request, so
distributed's client would wait for minutes, or read the server's reply as a
message length.  :func:`probe_scheduler` reads the first eight bytes on a raw
socket, with a deadline.
"""

from __future__ import annotations

import socket
import struct
import time

#: Largest first message a Dask scheduler sends (its handshake is a few dozen bytes);
#: a server that announces more is not one (an HTTP server's reply read as a length
#: would make distributed allocate exabytes).
MAX_HANDSHAKE_BYTES = 2**20


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a TCP scheduler address; None for other protocols."""
    protocol, sep, rest = address.partition("://")
    if not sep:
        protocol, rest = "tcp", address
    if protocol != "tcp":
        return None
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


def probe_scheduler(address: str, timeout: float) -> None:
    """Check that a Dask scheduler answers at ``address`` (TCP) within ``timeout`` seconds.

    A Dask scheduler sends its handshake as soon as a connection opens; a
    server of another kind (the dashboard's HTTP port, say) waits for a request,
    so distributed's client would wait for minutes, or read the server's reply
    as a message length.  Other protocols (TLS, UCX) are left to distributed.

    Raises
    ------
    ConnectionError
        Naming the address and what was found there.
    """
    where = _host_port(address)
    if where is None:
        return
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection(where, timeout=timeout)
    except TimeoutError:
        raise ConnectionError(f"cannot connect to the Dask scheduler at {address}: no answer "
                              f"within {timeout:g} s (is the host reachable? --timeout "
                              "waits longer)") from None
    except OSError as exc:
        raise ConnectionError(f"cannot connect to the Dask scheduler at {address}: "
                              f"{exc.strerror or exc}") from None
    head = b""
    with sock:
        try:
            while len(head) < 8:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                part = sock.recv(8 - len(head))
                if not part:
                    break
                head += part
        except TimeoutError:
            raise ConnectionError(
                f"no Dask scheduler answered at {address} within {timeout:g} s: the server "
                "there accepted the connection but sent no Dask handshake (is it the "
                "dashboard's port? the scheduler's is 8786 by default); check the address, "
                "or pass a longer --timeout") from None
        except OSError as exc:
            raise ConnectionError(f"cannot talk to the Dask scheduler at {address}: "
                                  f"{exc.strerror or exc}") from None
    if len(head) < 8 or not 0 < struct.unpack("<Q", head)[0] <= MAX_HANDSHAKE_BYTES:
        raise ConnectionError(
            f"the server at {address} is not a Dask scheduler (it does not speak Dask's "
            "protocol; is it the dashboard's port? the scheduler's is 8786 by default)")
