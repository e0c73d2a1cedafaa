"""python3 -m fosd health|stats|list-weights [--server URL] [--token T]: a smoke command that
talks to fosd through this package (exit 0 when fosd answered, 1 with the error otherwise)."""

import argparse
import json
import sys

from . import Error, connect


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m fosd", description="Ask fosd through the fosd package.")
    p.add_argument("command", choices=["health", "stats", "list-weights"])
    p.add_argument("--server", help="fosd URL (default $FOS_SERVER, then ipc:///tmp/fosd.sock)")
    p.add_argument("--token", help="tenant token (default $FOS_TOKEN)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    a = p.parse_args(argv)
    try:
        with connect(a.server, a.token, a.timeout) as c:
            if a.command == "health":
                h = c.health()
                print("fosd %s: %s on %s, up %.1f s%s" % (h["version"], h["backend"], h["device"],
                                                         h["uptime_ms"] / 1000.0,
                                                         ", draining" if h["draining"] else ""))
                print("client: %s, tensors through %s" % (c.url, "shared memory" if c.shm else "messages"))
            elif a.command == "stats":
                print(json.dumps(c.stats(), indent=1))
            else:
                for w in c.list_weights():
                    print("%s v%d (%d, %d) %s %s bound %d, %d bytes" % (
                        w.name, w.version, w.n, w.k, w.weight_block, w.err, w.bound, w.bytes))
    except (Error, OSError) as e:
        msg = str(e)
        print(msg if msg.startswith("fosd: ") else "fosd: " + msg, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
