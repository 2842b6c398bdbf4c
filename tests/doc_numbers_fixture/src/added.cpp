int added() { return 3; }
