// File (see file.h).
#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hg {

File::File(const std::string& path, int flags, std::string_view what, mode_t mode)
    : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)), what_(what) {
  HG_CHECK(fd_ >= 0, what_, ": cannot open: ", std::strerror(errno));
}

File File::open_regular(const std::string& path, std::string_view what) {
  // NOTE: O_NONBLOCK so that opening a FIFO returns at once instead of waiting for a writer;
  // it is cleared again below, once we know the file is a regular one.
  File file(path, O_RDONLY | O_NONBLOCK, what);
  struct stat st {};
  HG_CHECK(::fstat(file.fd_, &st) == 0, what, ": cannot stat: ", std::strerror(errno));
  HG_CHECK(S_ISREG(st.st_mode), what, ": not a regular file (",
           S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket", ")");
  const int flags = ::fcntl(file.fd_, F_GETFL);
  HG_CHECK(flags >= 0 && ::fcntl(file.fd_, F_SETFL, flags & ~O_NONBLOCK) == 0, what, ": fcntl failed: ",
           std::strerror(errno));
  return file;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& other) noexcept : fd_(other.fd_), what_(std::move(other.what_)) { other.fd_ = -1; }

uint64_t File::size() const {
  struct stat st {};
  HG_CHECK(::fstat(fd_, &st) == 0, what_, ": cannot stat: ", std::strerror(errno));
  return uint64_t(st.st_size);
}

void File::read_exact(void* dst, uint64_t n, uint64_t at) const {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, size_t(std::min<uint64_t>(n, 1 << 30)), off_t(at));
    HG_CHECK(got > 0, what_, ": read failed at byte ", at, got == 0 ? ": unexpected end of file" : "");
    p += got;
    at += uint64_t(got);
    n -= uint64_t(got);
  }
}

void File::write_all(const void* src, uint64_t n) const {
  const char* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd_, p, size_t(std::min<uint64_t>(n, 1 << 30)));
    HG_CHECK(put > 0, what_, ": write failed: ", std::strerror(errno));
    p += put;
    n -= uint64_t(put);
  }
}

void File::sync() const { HG_CHECK(::fsync(fd_) == 0, what_, ": fsync failed: ", std::strerror(errno)); }

void File::close() {
  const int fd = release();
  HG_CHECK(::close(fd) == 0, what_, ": close failed: ", std::strerror(errno));
}

void write_text_file(const std::string& path, std::string_view text, std::string_view what) {
  File file(path, O_WRONLY | O_CREAT | O_TRUNC, what);
  file.write_all(text.data(), text.size());
  file.close();
}

int File::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace hg
