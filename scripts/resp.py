"""A small Redis client for the measuring scripts (RESP2 over one
connection, one command at a time or pipelined), so that each script's
Python reads Redis the same way. Replies come back as text, integers,
lists or None; an error reply raises.

    import sys; sys.path.insert(0, "scripts")
    from resp import Redis
    r = Redis(port)
    r("ZRANK", key, user)
"""
import socket


class Redis:
    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.create_connection((host, int(port)))
        self.file = self.sock.makefile("rb")

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in b"+:":
            return rest.decode() if kind == b"+" else int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2].decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def __call__(self, *args):
        self.sock.sendall(self.encode(args))
        return self.read()

    def pipeline(self, commands, depth=20):
        """Sends the commands `depth` at a time, reading each reply."""
        for i in range(0, len(commands), depth):
            part = commands[i:i + depth]
            self.sock.sendall(b"".join(self.encode(c) for c in part))
            for _ in part:
                self.read()

    def commandstats(self):
        """usec per command, from INFO commandstats."""
        out = {}
        for line in self("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                fields = dict(f.split("=") for f in rest.split(","))
                out[name] = int(fields["usec"])
        return out
