"""What the Python tests share: checks that collect failures instead of stopping at the first, and a command runner
that prints what it runs and how long it took. A test imports it after putting tests/support on sys.path, calls
check() as it goes, and exits with finish()."""
import subprocess
import sys
import time

failures = []


def check(condition, message):
    """Records a failed check (and prints it at once, so a long test shows it where it happened)."""
    if not condition:
        failures.append(message)
        print("FAILED: " + message, flush=True)
    return condition


def require(condition, message):
    """A check the rest of the test cannot go on without: it exits with status 1."""
    if not condition:
        print("FAILED: " + message, flush=True)
        sys.exit(1)


def run(cmd, cwd=None, env=None, expect=0):
    """Runs cmd and returns the CompletedProcess (text output). A status other than `expect` (unless None) prints
    the output's tails and stops the test."""
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    started = time.monotonic()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    print(f"  (exit {proc.returncode}, {time.monotonic() - started:.1f} s)", flush=True)
    if expect is not None and proc.returncode != expect:
        print(proc.stdout[-4000:] + "\n" + proc.stderr[-4000:], flush=True)
        require(False, f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''} exited with {proc.returncode}, expected {expect}")
    return proc


def finish(name, started):
    """The test's exit status: 1 if any check failed, else 0, with a last line that counts them."""
    print(f"{name}: {len(failures)} failed check(s), {time.monotonic() - started:.0f} s", flush=True)
    return 1 if failures else 0
