/* Loaded by musterd before civetweb starts HTTPS, under the soname
 * "libssl.so" (common/CMakeLists.txt). Debian 12's civetweb 1.15 was built for
 * OpenSSL 1.1: it dlopen()s "libssl.so" and looks up SSL_get_peer_certificate,
 * which OpenSSL 3 renamed SSL_get1_peer_certificate (same reference
 * semantics). With this library loaded first, civetweb's dlopen("libssl.so")
 * finds it by its soname, and its dlsym() lookups find OpenSSL 3's functions
 * through it (its own dependency) and the old name here. Without it, HTTPS
 * fails on every Debian 12 machine ("cannot find SSL_get_peer_certificate"). */
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate

__attribute__((visibility("default"))) X509* SSL_get_peer_certificate(
    const SSL* ssl) {
  return SSL_get1_peer_certificate(ssl);
}
