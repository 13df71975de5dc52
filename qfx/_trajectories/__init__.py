"""The trajectories backend: pure states, one Kraus choice per channel per key. See README.md."""

from ._backend import Trajectories as Trajectories
