// A ripple-carry adder (majority / unmajority gates): b <- a + b, carry out in cout.
// a = 1 or 3 (a[1] in superposition), b = 3; qubit k of a register is its bit of weight 2**k.
OPENQASM 2.0;
include "qelib1.inc";
gate majority a, b, c { cx c, b; cx c, a; ccx a, b, c; }
gate unmaj a, b, c { ccx a, b, c; cx c, a; cx a, b; }
qreg cin[1];
qreg a[2];
qreg b[2];
qreg cout[1];
x a[0];
h a[1];
x b;
barrier a, b;
majority cin[0], b[0], a[0];
majority a[0], b[1], a[1];
cx a[1], cout[0];
unmaj a[0], b[1], a[1];
unmaj cin[0], b[0], a[0];
