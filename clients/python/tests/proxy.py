"""A TCP proxy for the tests that drops connections on purpose."""

from __future__ import annotations

import socket
import threading


class DroppingProxy:
    """Relays connections to ``target`` (host, port). On the first
    ``drop`` connections, once a whole request has been forwarded, the
    client's side is closed before any answer: the client sees a dropped
    connection while sandboxd, whose side stays open until its answer
    starts (which is thrown away), goes on with the request undisturbed. Records
    each request's head."""

    def __init__(self, target: tuple[str, int], drop: int = 1) -> None:
        self.target = target
        self.drop = drop
        self.heads: list[str] = []
        self._lock = threading.Lock()
        self._count = 0
        self._ln = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self._ln.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._ln.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._ln.accept()
            except OSError:
                return
            with self._lock:
                n = self._count
                self._count += 1
            threading.Thread(target=self._serve, args=(conn, n < self.drop), daemon=True).start()

    def _serve(self, conn: socket.socket, drop: bool) -> None:
        up = socket.create_connection(self.target)
        if drop:
            try:
                head, body = self._read_request(conn)
                up.sendall(head + body)
                conn.close()
                up.recv(65536)  # the start of the answer, lost on the way
            finally:
                conn.close()
                up.close()
            return
        threading.Thread(target=self._pipe, args=(up, conn), daemon=True).start()
        while True:
            data = conn.recv(65536)
            if not data:
                break
            if data[:8].split(b" ")[0] in (b"GET", b"POST", b"DELETE") and b"\r\n\r\n" in data:
                self.heads.append(data.partition(b"\r\n\r\n")[0].decode("latin-1"))  # a request's start
            up.sendall(data)
        up.close()

    def _read_request(self, conn: socket.socket) -> tuple[bytes, bytes]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = conn.recv(65536)
            if not data:
                raise ConnectionError("closed before a request")
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        text = head.decode("latin-1")
        self.heads.append(text)
        length = 0
        for line in text.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(body) < length:
            data = conn.recv(65536)
            if not data:
                break
            body += data
        return head + b"\r\n\r\n", body

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def header(self, i: int, name: str) -> str | None:
        for line in self.heads[i].split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == name.lower():
                return v.strip()
        return None
