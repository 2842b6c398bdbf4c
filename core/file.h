// File: a POSIX file descriptor that closes itself, with the checked reads and writes the file
// formats need (safetensors, IDX). Files that come from users are opened with
// File::open_regular: a FIFO, device or directory given as a checkpoint or dataset path is an
// hg::Error at once, instead of a read that blocks forever (a FIFO) or never ends (/dev/zero).
//
//   const hg::File file = hg::File::open_regular(path, "load(\"" + path + "\")");
//   file.read_exact(buffer, n, offset);
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace hg {

class File {
 public:
  // open(2) with `flags`; `what` starts every error message ("save(\"a.safetensors\")").
  File(const std::string& path, int flags, std::string_view what, mode_t mode = 0644);
  // Opens an existing regular file for reading; anything else is an hg::Error naming it.
  static File open_regular(const std::string& path, std::string_view what);
  ~File();
  File(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File& operator=(File&&) = delete;

  uint64_t size() const;
  // Reads exactly n bytes at offset `at`; a short file is an hg::Error.
  void read_exact(void* dst, uint64_t n, uint64_t at) const;
  void write_all(const void* src, uint64_t n) const;
  void sync() const;
  void close();
  // Gives up ownership of the descriptor (e.g. to zlib's gzdopen, which closes it itself).
  int release();

 private:
  File(int fd, std::string_view what) : fd_(fd), what_(what) {}
  int fd_;
  std::string what_;
};

// Writes `text` to `path` (created or truncated) and closes it, every step checked: a full disk
// or /dev/full is an hg::Error starting with `what`, not a file silently left empty (a C++ stream
// reports such a failure only when flushed, after the caller has checked it).
void write_text_file(const std::string& path, std::string_view text, std::string_view what);

}  // namespace hg
