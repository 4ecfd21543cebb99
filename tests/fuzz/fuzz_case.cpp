#include "fuzz_case.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "listing.h"
#include "program_text.h"

namespace kfuzz {

std::string reproducer(uint64_t program_seed, const std::string& device) {
  return "kiln_fuzz --program-seed " + std::to_string(program_seed) + " --device " + device;
}

std::string case_file_text(const Program& shrunk, const Mismatch& mismatch,
                           const std::string& reproducer_line) {
  std::ostringstream os;
  os << "# kiln fuzz case: " << mismatch.leg << " disagreed with cpu/eager\n";
  std::istringstream detail(mismatch.detail);
  for (std::string line; std::getline(detail, line);) os << "#   " << line << "\n";
  os << "# found by: " << reproducer_line << " (then shrunk)\n#\n";
  std::istringstream listing(cpp_listing(shrunk));
  for (std::string line; std::getline(listing, line);) os << "# " << line << "\n";
  os << to_text(shrunk);
  return os.str();
}

std::string save_case(const std::string& dir, const Program& shrunk, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/case-" + std::to_string(shrunk.seed) + ".fuzz";
  std::ofstream out(path);
  if (!out) return "";
  out << text;
  return out ? path : "";
}

std::vector<std::string> case_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".fuzz") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace kfuzz
