// A fixture for cmake/check_signposts.py (CTest signposts.check_reports_*): every line below is a
// fault it must report. The kernel lives in kernels/gone.h (moved), see TESTING.md.
void add() { record("add", out, {a, b}, nullptr); }
