# One connection of the guest's forward to a loopback service of the host: qemu's user-mode
# network starts this for each TCP connection the guest opens to the forwarded address
# (guestfwd=...-cmd:), with the connection on stdin and stdout; it connects to
# 127.0.0.1:PORT and copies both ways until either side closes.
import os
import select
import socket
import sys

port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.settimeout(None)
open_in, open_out = True, True
while open_in or open_out:
    r, _, _ = select.select(([0] if open_in else []) + ([s] if open_out else []), [], [])
    if 0 in r:
        b = os.read(0, 65536)
        if b:
            s.sendall(b)
        else:
            open_in = False
            s.shutdown(socket.SHUT_WR)
    if s in r:
        b = s.recv(65536)
        if b:
            while b:
                b = b[os.write(1, b):]
        else:
            break
s.close()
