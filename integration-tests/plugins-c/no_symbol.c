/* A shared library that is not a rocewatch plugin: no rocewatch_plugin_entry symbol. */
int some_other_function(void) { return 42; }
