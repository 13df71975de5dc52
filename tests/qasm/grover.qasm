// Grover search for |101> on 3 qubits: two iterations of oracle and diffuser.
OPENQASM 3.0;
include "stdgates.inc";
gate oracle a, b, c { ctrl @ negctrl @ z a, b, c; }
gate diffuser a, b, c {
  h a; h b; h c;
  x a; x b; x c;
  ctrl(2) @ z a, b, c;
  x a; x b; x c;
  h a; h b; h c;
}
qubit[3] q;
h q;
for uint k in [1:2] {
  oracle q[0], q[1], q[2];
  diffuser q[0], q[1], q[2];
}
