// Which BLAS LibTorch runs on, read from the libraries loaded in this process: the run's header line says it, so a
// slow reference BLAS is seen at once.
#include <link.h>

#include <filesystem>
#include <string>

#include "baton/trainer.h"

namespace fs = std::filesystem;

namespace baton {

std::string blas_description() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        auto base = fs::path(name).filename().string();
        if (base.rfind("libblas", 0) == 0 || base.rfind("libopenblas", 0) == 0 || base.rfind("libmkl_rt", 0) == 0) {
          std::error_code ec;
          auto real = fs::canonical(name, ec);
          *static_cast<std::string*>(data) = ec ? name : real.string();
          return 1;
        }
        return 0;
      },
      &found);
  if (found.empty()) return "unknown (no BLAS library loaded)";
  if (found.find("openblas") != std::string::npos) return "OpenBLAS (" + found + ")";
  if (found.find("mkl") != std::string::npos) return "MKL (" + found + ")";
  if (found.find("blis") != std::string::npos) return "BLIS (" + found + ")";
  if (found.find("atlas") != std::string::npos) return "ATLAS (" + found + ")";
  return "reference BLAS, slow: install libopenblas0-pthread (" + found + ")";
}

}  // namespace baton
