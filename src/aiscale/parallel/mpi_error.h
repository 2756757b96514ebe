// The MPI library's own words for an error code, for the messages of the MPI communicators.
#pragma once
#ifdef AISCALE_HAVE_MPI
#include <mpi.h>

#include <string>

namespace aiscale::parallel {

inline std::string mpi_error_text(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return std::string(msg, len);
}

}  // namespace aiscale::parallel
#endif
