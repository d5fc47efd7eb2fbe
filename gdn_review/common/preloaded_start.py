"""A Python command's own process when the preload server runs it (``common/preloaded.py``).

Started by ``interrupts.popen`` as ``python -I -S preloaded_start.py SERVER PID_FD ARG...`` with
the command's environment, working folder and standard streams; ``ARG...`` are the command's
interpreter arguments. It hands all of that to the server, writes the forked child's pid to
``PID_FD``, waits and ends as the child ended (its exit status, or killed by its signal). Where
the server is not there or declines, it writes its own pid and execs a fresh interpreter with the
command. The standard library only, nothing of gdn_review: it starts in a few milliseconds.
"""

import json
import os
import signal
import socket
import struct
import sys


def main() -> None:
    server, pid_fd, arguments = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    replies = None
    reply = []
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect("\0" + server)
        # Bytes as latin-1 text: every value survives JSON and comes back byte for byte.
        env = {k.decode("latin-1"): v.decode("latin-1") for k, v in os.environb.items()}
        # Signals ignored from the start (`nohup`, a script's `cmd &`) stay ignored in a fresh
        # interpreter: the child ignores them too.
        ignored = [
            int(signum)
            for signum in signal.valid_signals()
            if signum not in (signal.SIGKILL, signal.SIGSTOP)
            and signal.getsignal(signum) == signal.SIG_IGN
        ]
        request = {"argv": arguments, "cwd": os.getcwd(), "env": env, "ignored": ignored}
        payload = json.dumps(request).encode()
        socket.send_fds(connection, [struct.pack("!Q", len(payload))], [0, 1, 2])
        connection.sendall(payload)
        replies = connection.makefile("rb")
        reply = replies.readline().split()
    except OSError:
        pass
    if len(reply) != 2 or reply[0] != b"pid":
        os.write(pid_fd, b"%d\n" % os.getpid())
        os.close(pid_fd)
        os.execv(sys.executable, [sys.executable, *arguments])
    os.write(pid_fd, reply[1] + b"\n")
    os.close(pid_fd)
    try:
        end = replies.readline().split()
    except OSError:
        end = []
    if len(end) == 2 and end[0] == b"exit":
        os._exit(int(end[1]) & 0xFF)
    if len(end) == 2 and end[0] == b"signal":
        signum = int(end[1])
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os.write(2, b"gdn-review: the preload server ended before the command did\n")
    os._exit(1)


if __name__ == "__main__":
    main()
