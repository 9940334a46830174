"""The `ttt` command line: the root group, its command groups (one module each), and `main`: user errors print one
line on stderr and exit with status 2, without a traceback; SIGINT / SIGTERM exit with 130 / 143."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from ttt.cli.common import SAVED, interrupt_note
from ttt.cli.data import data
from ttt.cli.evaluate import eval_cmd
from ttt.cli.expert import expert
from ttt.cli.interop import export_group, import_group
from ttt.cli.run import report_cmd, run_cmd
from ttt.cli.train import pretrain_cmd
from ttt.errors import TttError


@click.group(context_settings=dict(help_option_names=["-h", "--help"]))
@click.version_option(package_name="ttt")
def cli() -> None:
    """Goal-conditioned test-time training (GC-TTT) on OGBench, in JAX/Equinox."""


for command in (data, expert, pretrain_cmd, eval_cmd, run_cmd, report_cmd, import_group, export_group):
    cli.add_command(command)


def _init_distributed() -> None:
    """Join a multi-process JAX run when TTT_COORDINATOR (host:port), TTT_NUM_PROCESSES and TTT_PROCESS_ID are set:
    `ttt eval` then shards its episode batches over every process's devices (CPU: gloo collectives)."""
    import os

    addr = os.environ.get("TTT_COORDINATOR")
    if not addr:
        return
    try:
        n, i = int(os.environ["TTT_NUM_PROCESSES"]), int(os.environ["TTT_PROCESS_ID"])
    except (KeyError, ValueError):
        raise TttError(
            "TTT_COORDINATOR is set, so TTT_NUM_PROCESSES and TTT_PROCESS_ID must be integers "
            f"(got {os.environ.get('TTT_NUM_PROCESSES')!r}, {os.environ.get('TTT_PROCESS_ID')!r})"
        ) from None
    if not 0 <= i < n:
        raise TttError(f"TTT_PROCESS_ID must be in [0, TTT_NUM_PROCESSES), got {i} of {n}")
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # used only by CPU devices
    jax.distributed.initialize(coordinator_address=addr, num_processes=n, process_id=i)


def _stop_on_signals() -> Callable[[], None] | None:
    """SIGINT / SIGTERM stop the command within a moment, whatever it is doing, with a one-line message and exit
    status 128 + the signal (130, 143).

    Why not Python's KeyboardInterrupt: while a compiled program runs (a TTT batch, a pre-training chunk), the main
    thread is inside XLA and Python's handler runs only when the call returns (minutes later), and an exception
    raised then in the middle of JAX's runtime can crash the process (exit 139). Instead the signal's number goes to a
    wakeup socket that a watcher thread reads: it prints the message, ends worker processes and exits at once.
    Nothing finished is lost because every artifact is written atomically when it is finished (data blocks,
    checkpoints per chunk, evaluation tasks and variants, results after every row), so a rerun resumes.
    Returns a function that restores the previous handlers (None outside the main thread)."""
    import os
    import signal
    import socket
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    r, w = socket.socketpair()
    w.setblocking(False)
    wanted = (signal.SIGINT, signal.SIGTERM)
    old_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    old = {sig: signal.signal(sig, lambda *_: None) for sig in wanted}

    def watch():
        while True:
            try:
                data = r.recv(1)
            except OSError:
                return
            if not data:
                return
            if data[0] in wanted:
                break
        import multiprocessing

        name = signal.Signals(data[0]).name
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os.write(2, f"\ninterrupted ({name}): {interrupt_note()}\n".encode())

        def cleanup():  # worker processes, then the pools' and semaphores' finalizers (as at a normal exit)
            from multiprocessing import util

            for child in multiprocessing.active_children():
                child.terminate()
            util._run_finalizers(0)

        t = threading.Thread(target=cleanup, daemon=True)
        t.start()
        t.join(timeout=3.0)
        os._exit(128 + data[0])

    threading.Thread(target=watch, name="ttt-signal-watcher", daemon=True).start()

    def restore():
        signal.set_wakeup_fd(old_fd)
        for sig, h in old.items():
            signal.signal(sig, h)
        w.close()
        r.close()

    return restore


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit status 2 (no traceback)."""
    interrupt_note(SAVED)
    restore = _stop_on_signals()
    try:
        _init_distributed()
        rv = cli.main(args=argv, prog_name="ttt", standalone_mode=False)
    except TttError as e:  # one line whatever the message holds: names from files may carry control characters
        from ttt.safe_files import one_line

        click.echo(f"error: {one_line(str(e))}", err=True)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo(f"interrupted: {interrupt_note()}", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    finally:
        if restore is not None:
            restore()
    return rv if isinstance(rv, int) else 0
