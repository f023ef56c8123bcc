// The program of each capstep_link_<layer> target (CMakeLists.txt): it calls
// nothing; linking it with every object of one layer and of the layers below
// it fails on any reference to a layer above.
int main() { return 0; }
