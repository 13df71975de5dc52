"""The error every failure to read an OpenQASM program raises."""


class QasmError(ValueError):
    """An OpenQASM program that qfx cannot read, with the place of the fault.

    **Attributes:**

    - `line`, `column`: where the fault is, both counted from 1 (as editors count).
    - `reason`: the message without the place.
    """

    def __init__(self, reason: str, line: int = 1, column: int = 1):
        self.reason = reason
        self.line = line
        self.column = column
        super().__init__(f"OpenQASM, line {line}, column {column}: {reason}")
