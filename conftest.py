"""Settings for the whole test run (tests/ and property_tests/), made before JAX is imported."""

import os

# Most of the suite's time is XLA compiling small programs once each. LLVM's optimisation passes are
# most of that and buy nothing for programs run a few times on toy sizes, so the tests compile without
# them (about 35% less CPU on a compile-bound file; results are the same programs, and the subprocesses
# that run the examples and docs inherit it). Set QFX_TEST_XLA_OPT=1 to test with XLA's defaults.
if os.environ.get("QFX_TEST_XLA_OPT") != "1":
    os.environ["XLA_FLAGS"] = " ".join(
        [
            os.environ.get("XLA_FLAGS", ""),
            "--xla_backend_optimization_level=0",
            "--xla_llvm_disable_expensive_passes=true",
        ]
    ).strip()
