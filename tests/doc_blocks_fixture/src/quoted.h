// The file the fixture's page quotes.
int first();
int second();
int third();
