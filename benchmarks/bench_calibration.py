"""This machine's roofline, per framework, device and dtype: a matmul of known FLOPs and a
streaming copy of known bytes, so the report can place every attention cell between the
compute and the memory bound (mhabench.calibration.matmul_flops(size) and
copy_bytes(mib) turn the times into FLOP/s and bytes/s).
"""

from mhabench import calibration

from .common import DEVICE_PARAMS, DTYPES, FRAMEWORKS, THREADS, grid, unsupported_as_skip


class MatmulPeak:
    param_names = ["framework", "device", "dtype", "size", "threads"]
    params = [FRAMEWORKS, DEVICE_PARAMS, DTYPES, [grid(tiny=256, quick=1024, full=2048)],
              [THREADS]]
    rounds = grid(tiny=1, quick=1, full=2)
    warmup_time = 0.0  # the step is built warmed up (and compiled, for JAX)

    def setup(self, framework, device, dtype, size, threads):
        self.step = unsupported_as_skip(
            lambda: calibration.make_matmul(framework, device, dtype, size))

    def time_matmul(self, framework, device, dtype, size, threads):
        self.step()


class CopyBandwidth:
    param_names = ["framework", "device", "dtype", "mib", "threads"]
    params = [FRAMEWORKS, DEVICE_PARAMS, DTYPES, [grid(tiny=8, quick=64, full=256)],
              [THREADS]]
    rounds = grid(tiny=1, quick=1, full=2)
    warmup_time = 0.0

    def setup(self, framework, device, dtype, mib, threads):
        self.step = unsupported_as_skip(lambda: calibration.make_copy(framework, device, dtype,
                                                                      mib))

    def time_copy(self, framework, device, dtype, mib, threads):
        self.step()
