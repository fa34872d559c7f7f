"""Interpreters with Keras imported and nothing else: a server per backend forks one for each run.

Starting Python and importing Keras (TensorFlow, JAX or PyTorch beneath it) costs about six seconds of CPU;
most fresh-interpreter tests spend more of their time there than in what they check. The server is a fresh
interpreter that imports Keras on one backend, then forks a child per run: the child replaces ``__main__``,
``sys.argv``, ``sys.path``, the working directory, the environment and the standard streams as
``python -c CODE ARGS`` or ``python SCRIPT ARGS`` would have set them, runs the code, and ends as an
interpreter does (threads joined, ``atexit`` handlers run, streams flushed) with the exit status it would have.

Nothing of the test process reaches the child: the server is a new interpreter (the test process's environment,
without ``PYTHONPATH``), imports only what ``import keras`` imports and the standard library modules it needs
itself (never keras_pickle, the tests' modules or anything a test registered) and runs nothing of its own in the
child, so the child holds what a fresh interpreter holds once its first line,
``import keras``, has run. Only what happens at that import is not fresh: environment variables read then,
and the import order. :func:`helpers.run_python` forks only where the caller says the code may start with
Keras imported, and only where the environment asked for matches the server's in every variable read at
import (:data:`IMPORT_TIME`).

Run as a script by :class:`Server`: ``python tests/forkserver.py SOCKET``.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

IMPORT_TIME = ("PYTHON", "KERAS_", "TF_", "JAX_", "XLA_", "TORCH", "CUDA", "OMP_", "MKL", "OPENBLAS", "LD_", "HOME")
"""Prefixes of the environment variables read when Python starts or Keras and its backend are imported (Keras reads
and may write ``~/.keras/keras.json``): a run that asks for another value of one (``PYTHONHASHSEED``,
``KERAS_BACKEND``, ``HOME``...) starts a real interpreter instead.
``PYTHONPATH`` is the exception: the child sets ``sys.path`` from it as Python's start would have."""
HEADER = struct.Struct("!Q")


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that take effect when Python starts or imports Keras, ``PYTHONPATH`` aside."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME) and k != "PYTHONPATH"}


# --------------------------------------------------------------------------
# The client: one server per backend, started on first use
# --------------------------------------------------------------------------


class Server:
    """A server process for the environment ``env`` (its ``KERAS_BACKEND``); :meth:`start` forks a child from it."""

    def __init__(self, env: dict[str, str]):
        self.env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        self.directory = tempfile.mkdtemp(prefix="keras-pickle-forkserver-")
        self.address = os.path.join(self.directory, "socket")
        self.log = open(os.path.join(self.directory, "server.log"), "w+b")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.address], env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self.log, cwd=self.directory,
        )  # fmt: skip
        ready = self.process.stdout.readline()
        if ready.strip() != b"ready":
            self.log.seek(0)
            raise RuntimeError(f"the fork server did not start:\n{self.log.read().decode(errors='replace')[-6000:]}")

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a fresh interpreter started with ``env`` would import Keras as the server did."""
        return self.process.poll() is None and import_time_env(env) == import_time_env(self.env)

    def start(self, argv: list[str], *, cwd, env: dict[str, str]) -> Child:
        """``subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=PIPE, stderr=PIPE)``, forked from
        the server."""
        return Child(self.address, argv, cwd=cwd, env=env)

    def close(self) -> None:
        if self.log.closed:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdout.close()
        self.log.close()
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)


class Child:
    """A child forked by the server: its output goes to temporary files, its exit status comes on a connection."""

    def __init__(self, address: str, argv: list[str], *, cwd, env: dict[str, str]):
        self.args = [sys.executable, *argv]
        request = json.dumps({"argv": argv, "cwd": str(cwd or os.getcwd()), "env": env}).encode()
        self.outputs = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # noqa: SIM115 (closed in wait())
        self.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with open(os.devnull, "rb") as stdin:
            self.connection.connect(address)
            fds = [stdin.fileno(), *(stream.fileno() for stream in self.outputs)]
            socket.send_fds(self.connection, [HEADER.pack(len(request))], fds)
        self.connection.sendall(request)
        self.pid = HEADER.unpack(_receive(self.connection, HEADER.size))[0]
        self.ended = False

    def wait(self, timeout: float) -> subprocess.CompletedProcess:
        """Its exit status and output, as ``subprocess.run`` gives them; killed after ``timeout`` seconds."""
        self.connection.settimeout(timeout)
        try:
            status = HEADER.unpack(_receive(self.connection, HEADER.size))[0]
        except TimeoutError:
            self.kill()
            self.ended = True
            raise subprocess.TimeoutExpired(self.args, timeout) from None
        finally:
            self.connection.close()
        self.ended = True
        outputs = []
        for stream in self.outputs:
            stream.seek(0)
            outputs.append(stream.read().decode(errors="replace"))
            stream.close()
        return subprocess.CompletedProcess(self.args, os.waitstatus_to_exitcode(status), *outputs)

    def kill(self) -> None:
        """End it now, if it has not ended (once it has, its pid may be another process's)."""
        if not self.ended:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the fork server closed the connection (it died: see its log)")
        data += chunk
    return data


# --------------------------------------------------------------------------
# The server: import Keras, then fork a child per request
# --------------------------------------------------------------------------


def serve(address: str) -> None:
    import keras  # noqa: F401  (what every child starts with; nothing else is imported on purpose)

    gc.freeze()  # what the import made stays put: a child's collections pass over it, and its pages stay shared

    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent:  # the test process gone, the server goes too
        if selector.select(timeout=0.05):
            connection, _ = listener.accept()
            header, fds, _flags, _address = socket.recv_fds(connection, HEADER.size, 3)
            request = json.loads(_receive(connection, HEADER.unpack(header)[0]))
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                connection.close()
                _child(request, fds)  # never returns
            for fd in fds:
                os.close(fd)
            connection.sendall(HEADER.pack(pid))
            children[pid] = connection
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid, None)
            if connection is not None:
                try:
                    connection.sendall(HEADER.pack(status))
                except OSError:
                    pass  # the client gave up (its timeout) and killed the child
                connection.close()


def _child(request: dict, fds: list[int]) -> None:
    """Become ``python -c CODE ARGS`` or ``python SCRIPT ARGS`` (``request["argv"]``), run it and exit."""
    code = 1
    try:
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        env = request["env"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        argv = request["argv"]
        # sys.path as Python's start sets it: the script's folder ('' for -c), PYTHONPATH, then the rest.
        extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        if argv[0] == "-c":
            source, filename, first = argv[1], "<string>", ""
            sys.argv = ["-c", *argv[2:]]
        else:
            filename = argv[0]
            source = Path(filename).read_text()
            first = os.path.dirname(os.path.realpath(filename))
            sys.argv = list(argv)
        sys.path[:] = [first, *extra, *sys.path[1:]]
        import importlib

        importlib.invalidate_caches()
        main = type(sys)("__main__")
        main.__builtins__ = __builtins__
        if filename != "<string>":
            main.__file__ = filename
        sys.modules["__main__"] = main
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()  # a fresh interpreter's global generator is seeded anew, not the server's
        mp_process = sys.modules.get("multiprocessing.process")
        if mp_process is not None:
            mp_process.ORIGINAL_DIR = os.path.abspath(os.getcwd())
        try:
            exec(compile(source, filename, "exec"), main.__dict__)  # noqa: S102
            code = 0
        except SystemExit as exit:
            code = _exit_code(exit.code)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        code = _finish(main, code)
    finally:
        os._exit(code)


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _finish(main, code: int) -> int:
    """What the interpreter does when its main code ends: join threads, run ``atexit``, finalise, flush."""
    import atexit
    import threading

    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        main.__dict__.clear()
        gc.collect()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return code


if __name__ == "__main__":
    serve(sys.argv[1])
