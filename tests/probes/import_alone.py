"""Each module alone, in a child forked from an interpreter that holds the third-party
libraries it imports and no module of mhabench.

argv: PRELOAD (comma-separated modules imported first; one that fails to import is left to
the child) then the modules to check. Prints "FAILED NAME (exit status S)" for each module
that fails alone and "checked N" at the end."""

import importlib
import os
import sys

sys.path.insert(0, os.getcwd())  # modules of the cwd first, as `python -c` would find them

preload, names = sys.argv[1].split(","), sys.argv[2:]
for name in preload:
    try:
        importlib.import_module(name)
    except Exception:  # an optional one (a plug-in, a profiler): the child imports it
        pass
assert not [m for m in sys.modules if m.partition(".")[0] == "mhabench"], "preloaded mhabench"
for name in names:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            print(f"  {name}: {type(exc).__name__}: {exc}", flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        print(f"FAILED {name} (exit status {status})", flush=True)
print("checked", len(names))
