import jax
import pytest

# Every implicit dtype promotion is a bug in qfx: casts must be explicit.
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def x64():
    """Runs a test with complex128 / float64 defaults, restoring the setting afterwards."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)
