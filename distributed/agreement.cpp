// require_same_settings (see agreement.h): one all_gather of hashes, and only when they differ a
// second exchange of the differing values, for the message.
#include "distributed/agreement.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace hg::distributed {

namespace {

constexpr int64_t kMaxSettings = 64;  // the hash table's fixed size: every rank sends the same shape

// FNV-1a: enough to tell two texts apart (a collision would let a disagreement through, at a
// probability of 2^-64).
int64_t hash_of(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : text) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return int64_t(h);
}

// Every rank's text (which may differ in length): lengths first, then the bytes packed into
// i64 words of a common size.
std::vector<std::string> gather_texts(ProcessGroup& group, const std::string& mine) {
  const std::vector<Tensor> lengths = group.all_gather(from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1}));
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, l.item<int64_t>());
  const int64_t words = (longest + 7) / 8;
  std::vector<int64_t> packed(size_t(words), 0);
  if (!mine.empty()) std::memcpy(packed.data(), mine.data(), mine.size());
  const std::vector<Tensor> all = group.all_gather(from_vector(packed, {words}));
  std::vector<std::string> texts;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<int64_t> w = all[r].to_vector<int64_t>();
    texts.emplace_back(reinterpret_cast<const char*>(w.data()), size_t(lengths[r].item<int64_t>()));
  }
  return texts;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// "rank 1 has X, rank 0 has Y", or for lists the first item that differs.
std::string difference(const std::string& name, int rank, const std::string& theirs, const std::string& first) {
  const std::vector<std::string> a = lines_of(theirs), b = lines_of(first);
  std::ostringstream os;
  os << "the ranks disagree on " << name << ": ";
  if (a.size() <= 1 && b.size() <= 1) {
    os << "rank " << rank << " has " << quoted(theirs) << ", rank 0 has " << quoted(first);
    return os.str();
  }
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  os << "item " << i << " differs: rank " << rank << " has " << (i < a.size() ? quoted(a[i]) : "nothing")
     << ", rank 0 has " << (i < b.size() ? quoted(b[i]) : "nothing") << " (rank " << rank << ": " << a.size()
     << " items, rank 0: " << b.size() << ")";
  return os.str();
}

}  // namespace

void require_same_settings(ProcessGroup& group, const std::vector<Setting>& settings) {
  HG_CHECK(int64_t(settings.size()) <= kMaxSettings - 2, "require_same_settings: at most ", kMaxSettings - 2,
           " settings, got ", settings.size());
  // [count, hash of the names, hash of each value, 0...]: fixed size, so a rank with other names
  // (another program) is told so too, not refused by a shape check.
  std::vector<int64_t> mine(size_t(kMaxSettings), 0);
  std::string names;
  for (const Setting& s : settings) names += s.name + '\n';
  mine[0] = int64_t(settings.size());
  mine[1] = hash_of(names);
  for (size_t i = 0; i < settings.size(); ++i) mine[i + 2] = hash_of(settings[i].value);
  const std::vector<Tensor> all = group.all_gather(from_vector(mine, {kMaxSettings}));
  std::vector<std::vector<int64_t>> rows;
  for (const Tensor& t : all) rows.push_back(t.to_vector<int64_t>());

  // The first (setting, rank) that differs from rank 0, the same on every rank.
  for (int r = 1; r < group.world_size(); ++r)
    HG_CHECK(rows[size_t(r)][0] == rows[0][0] && rows[size_t(r)][1] == rows[0][1], "the ranks disagree on which settings "
             "they compare: rank ", r, " runs another program or version than rank 0");
  for (size_t i = 0; i < settings.size(); ++i) {
    for (int r = 1; r < group.world_size(); ++r) {
      if (rows[size_t(r)][i + 2] == rows[0][i + 2]) continue;
      const std::vector<std::string> values = gather_texts(group, settings[i].value);
      HG_FAIL(difference(settings[i].name, r, values[size_t(r)], values[0]),
              " (every rank must start with the same settings)");
    }
  }
}

std::string structure_of(const nn::Module& module) {
  std::ostringstream os;
  for (const auto& [kind, list] : {std::pair{"parameter ", module.named_parameters()}, {"buffer ", module.named_buffers()}})
    for (const auto& [name, t] : list) os << kind << name << " " << t.shape() << " " << t.dtype() << '\n';
  return os.str();
}

}  // namespace hg::distributed
