/* Loaded under the soname "libcrypto.so" (common/CMakeLists.txt): civetweb
 * dlopen()s OpenSSL's crypto library by that name, which only libssl-dev
 * installs; this library depends on libcrypto.so.3 and so serves its
 * lookups. See libssl_shim.c. */
__attribute__((visibility("default"))) int muster_civetweb_libcrypto_shim =
    1;
