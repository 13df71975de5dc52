"""Control flow: operations (loops, conditionals, mid-circuit measurements), their static analysis, the
traversal that runs them with any simulator, and AutoGraph. See README.md."""

from ._autograph import autograph as autograph
from ._operations import (
    AbstractControlOperation as AbstractControlOperation,
    Cond as Cond,
    ForLoop as ForLoop,
    MeasurementValue as MeasurementValue,
    MidMeasure as MidMeasure,
    WhileLoop as WhileLoop,
    cond as cond,
    evaluate as evaluate,
    for_loop as for_loop,
    measure as measure,
    switch as switch,
    while_loop as while_loop,
)
from ._program import Program as Program, has_control as has_control, loop_body as loop_body
from ._traversal import Mixed as Mixed, capped_while as capped_while, traverse as traverse
