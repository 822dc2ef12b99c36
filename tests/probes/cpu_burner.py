"""Burns 1 s of CPU, writes its pid to FLAG, then sleeps 30 s (its test stops it by pid).

argv: HOW FLAG, HOW "plain" (this process burns), "grandchild" (a child of this process
burns) or "detach" (this process forks and leaves: the burner is init's child)."""

import os
import subprocess
import sys
import time

how, flag = sys.argv[1], sys.argv[2]
if how == "detach" and os.fork():
    os._exit(0)
if how == "grandchild":
    subprocess.run([sys.executable, __file__, "plain", flag])
    sys.exit(0)
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
with open(flag + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(flag + ".tmp", flag)
time.sleep(30)
