import os

from hypothesis import HealthCheck, settings
import jax

# Every implicit dtype promotion is a bug in qfx: casts must be explicit (as in tests/conftest.py).
jax.config.update("jax_numpy_dtype_promotion", "strict")

# The CI profile: few, small, reproducible examples (every new circuit structure costs a compilation).
# HYPOTHESIS_PROFILE=thorough runs more of them locally.
settings.register_profile(
    "ci",
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
