// The socket calls the TCP store (store_tcp.cpp) and the TCP mesh (tcp_mesh.cpp) share:
// a listening socket on every interface (IPv6 with IPv4 beside it, else IPv4), a connect
// that retries until a deadline (the listening side may start later), whole-buffer
// blocking transfers, and the local address a rank is reached by.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace aiscale::parallel::tcp {

using Clock = std::chrono::steady_clock;

// Listens on `port` (0: a free one) on every interface. Returns the socket, or -1 with the
// errno in *error; *bound_port gets the port it listens on.
int listen_any(int port, int backlog, int* bound_port, int* error);

// Connects to host:port before `deadline`, retrying while nobody listens yet; the blocking
// socket, or -1 on timeout with the last reason in `why`.
int connect_until(const std::string& host, int port, Clock::time_point deadline, std::string& why);

// Whole-buffer send/receive on a blocking socket; false when the peer closed, the socket
// failed or its time-out (SO_RCVTIMEO/SO_SNDTIMEO) passed (errno says which).
bool send_all(int fd, const void* data, size_t n);
bool recv_all(int fd, void* data, size_t n);

// Bounds every blocking send and receive on `fd` by `seconds`.
void set_io_timeout(int fd, double seconds);
void set_no_delay(int fd);
void set_non_blocking(int fd);

// This host's name (gethostname), "localhost" when it has none.
std::string host_name();
// The numeric address of this host's interface towards host:port (the one its packets to
// that host leave by: no packet is sent), or "" when the host does not resolve.
std::string local_address_towards(const std::string& host, int port);

// "host:port", the host in brackets when it is an IPv6 address.
std::string host_port(const std::string& host, int port);

}  // namespace aiscale::parallel::tcp
