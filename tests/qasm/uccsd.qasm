// A UCCSD-style ansatz for H2 in a minimal basis (4 spin orbitals, Jordan-Wigner): the Hartree-Fock
// state |1100>, two single excitations and the double excitation as exponentials of Pauli words.
OPENQASM 3.0;
include "stdgates.inc";
input angle t_single;
input float t_double;
// exp(-i theta/2 X_a Z_b Y_c) and exp(-i theta/2 Y_a Z_b X_c): the single excitation a -> c.
gate xzy(theta) a, b, c { h a; rx(pi/2) c; cx a, b; cx b, c; rz(theta) c; cx b, c; cx a, b; rx(-pi/2) c; h a; }
gate yzx(theta) a, b, c { rx(pi/2) a; h c; cx a, b; cx b, c; rz(theta) c; cx b, c; cx a, b; h c; rx(-pi/2) a; }
gate single(theta) a, b, c { xzy(theta) a, b, c; inv @ yzx(theta) a, b, c; }
// exp(-i theta/2 P) for a 4-letter word P of X and Y (h turns X, rx(pi/2) turns Y into Z).
gate xxxy(theta) a, b, c, d { h a; h b; h c; rx(pi/2) d; cx a, b; cx b, c; cx c, d; rz(theta) d; cx c, d; cx b, c; cx a, b; h a; h b; h c; rx(-pi/2) d; }
gate xxyx(theta) a, b, c, d { h a; h b; rx(pi/2) c; h d; cx a, b; cx b, c; cx c, d; rz(theta) d; cx c, d; cx b, c; cx a, b; h a; h b; rx(-pi/2) c; h d; }
gate xyxx(theta) a, b, c, d { h a; rx(pi/2) b; h c; h d; cx a, b; cx b, c; cx c, d; rz(theta) d; cx c, d; cx b, c; cx a, b; h a; rx(-pi/2) b; h c; h d; }
gate yxxx(theta) a, b, c, d { rx(pi/2) a; h b; h c; h d; cx a, b; cx b, c; cx c, d; rz(theta) d; cx c, d; cx b, c; cx a, b; rx(-pi/2) a; h b; h c; h d; }
gate double(theta) a, b, c, d {
  xxxy(theta / 4) a, b, c, d;
  xxyx(theta / 4) a, b, c, d;
  inv @ xyxx(theta / 4) a, b, c, d;
  inv @ yxxx(theta / 4) a, b, c, d;
}
qubit[4] q;
x q[0];
x q[1];
double(t_double) q[0], q[1], q[2], q[3];
single(t_single) q[0], q[1], q[2];
single(t_single / 2) q[1], q[2], q[3];
