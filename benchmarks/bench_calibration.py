"""This machine's roofline, per framework, device and dtype: a matmul of known FLOPs and a
streaming copy of known bytes, so the report can place every attention cell between the
compute and the memory bound (mhabench.measure.calibration.matmul_flops(size) and
copy_bytes(mib) turn the times into FLOP/s and bytes/s). Each device gets its own problem
size (mhabench.measure.calibration.MATMUL_SIZE, COPY_MIB); other size x device cells are
skipped.
"""

import itertools

from mhabench.bench.axes import FRAMEWORKS
from mhabench.bench.cells import unsupported_as_skip
from mhabench.bench.common import DEVICES, DTYPES, GRID, THREADS
from mhabench.measure import calibration

SIZES = {device: calibration.MATMUL_SIZE[device][GRID] for device in DEVICES}
MIBS = {device: calibration.COPY_MIB[device][GRID] for device in DEVICES}


def _other_devices_sizes(params, sizes):
    """Cells whose size belongs to another device (asv skips them before setup)."""
    return [cell for cell in itertools.product(*params) if sizes[cell[1]] != cell[3]]


class Calibration:
    number = 1
    repeat = (5, 20, 2.0)
    warmup_time = 0.2


class MatmulPeak(Calibration):
    param_names = ["framework", "device", "dtype", "size", "threads"]
    params = [FRAMEWORKS, DEVICES, DTYPES, sorted(set(SIZES.values())), [THREADS]]
    skip_params = _other_devices_sizes(params, SIZES)

    def setup(self, framework, device, dtype, size, threads):
        self.step = unsupported_as_skip(
            lambda: _cached(calibration.make_matmul, framework, device, dtype, size))

    def time_matmul(self, framework, device, dtype, size, threads):
        self.step()


class CopyBandwidth(Calibration):
    param_names = ["framework", "device", "dtype", "mib", "threads"]
    params = [FRAMEWORKS, DEVICES, DTYPES, sorted(set(MIBS.values())), [THREADS]]
    skip_params = _other_devices_sizes(params, MIBS)

    def setup(self, framework, device, dtype, mib, threads):
        self.step = unsupported_as_skip(
            lambda: _cached(calibration.make_copy, framework, device, dtype, mib))

    def time_copy(self, framework, device, dtype, mib, threads):
        self.step()


_STEPS: dict = {}


def _cached(make, *args):
    # asv re-runs setup before every sample: build (and compile) each step once.
    key = (make.__name__, *args)
    if key not in _STEPS:
        _STEPS[key] = make(*args)
    return _STEPS[key]
