// QAOA for MaxCut on a 4-cycle, two layers; layer k uses angles k * g and b / k.
OPENQASM 3.0;
include "stdgates.inc";
input float g;
input float b;
gate rzz(theta) a, c { cx a, c; rz(theta) c; cx a, c; }
qubit[4] q;
h q;
for uint k in [1:2] {
  rzz(k * g) q[0], q[1];
  rzz(k * g) q[1], q[2];
  rzz(k * g) q[2], q[3];
  rzz(k * g) q[3], q[0];
  rx(2 * b / k) q[0];
  rx(2 * b / k) q[1];
  rx(2 * b / k) q[2];
  rx(2 * b / k) q[3];
}
