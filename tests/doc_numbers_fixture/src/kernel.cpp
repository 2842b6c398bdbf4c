int kernel() { return 2; }  // changed since the numbers were generated
