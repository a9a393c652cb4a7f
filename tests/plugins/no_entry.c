/* test-only: a shared object without mpx_plugin_entry */
__attribute__((visibility("default"))) int not_an_mpx_plugin(void);
__attribute__((visibility("default"))) int not_an_mpx_plugin(void) { return 42; }
