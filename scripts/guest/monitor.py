# Talks to a guest's qemu human monitor (-monitor unix:SOCKET,server,nowait): sends each
# command given and prints its answer. Used when a guest stops answering, to tell a frozen
# machine (no answer here, or vCPUs that do not move) from a guest whose own commands hang.
#   python3 monitor.py SOCKET 'info status' 'info registers -a' ...
# Exits 1 when the monitor does not answer within 10 s (qemu itself is stuck).
import socket
import sys
import time

PROMPT = b"(qemu) "


def read_until_prompt(s, deadline):
    buf = b""
    while not buf.endswith(PROMPT):
        s.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def main():
    path, commands = sys.argv[1], sys.argv[2:]
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        read_until_prompt(s, time.monotonic() + 10)
        for cmd in commands:
            s.sendall(cmd.encode() + b"\n")
            out = read_until_prompt(s, time.monotonic() + 10).decode(errors="replace")
            # The monitor echoes the command line (with terminal escapes) before its answer.
            lines = out.replace("\r", "").split("\n")[1:]
            text = "\n".join(l for l in lines if not l.startswith("(qemu)")).strip()
            print(f"(qemu) {cmd}\n{text}" if text else f"(qemu) {cmd}")
    except (OSError, socket.timeout) as e:
        print(f"monitor {path}: no answer ({e})")
        sys.exit(1)


main()
