// Encoding with the byte-level BPE model (bytelevel.h, read by
// bytelevel.cpp): added tokens cut out, NFC, the pre-tokenizers (GPT-2's
// regex by hand, Split by PCRE2, Digits, ByteLevel) and BPE merges per piece.
#include "bytelevel.h"
#include "bytelevel_model.h"

#if defined(CAPSTEP_HAVE_UTF8PROC)
#include <utf8proc.h>
#endif

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

namespace capstep::data {

namespace {

struct Range {
  uint32_t lo, hi;
  int cls;
};
constexpr Range kClasses[] = {
#include "unicode_classes.inc"
};

bool white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace

namespace bytelevel_detail {

CharClass class_of(uint32_t cp) {
  if (white_space(cp)) return CharClass::space;
  const Range* end = kClasses + sizeof kClasses / sizeof kClasses[0];
  const Range* r = std::upper_bound(kClasses, end, cp, [](uint32_t c, const Range& x) { return c < x.lo; });
  if (r == kClasses || cp > (r - 1)->hi) return CharClass::other;
  return (r - 1)->cls == 1 ? CharClass::letter : CharClass::number;
}

size_t char_at(std::string_view t, size_t i, uint32_t* code_point) {
  const unsigned char c = static_cast<unsigned char>(t[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    *code_point = c;
    return 1;
  }
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  bool ok = n != 0 && i + n <= t.size();
  for (size_t k = 1; ok && k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(t[i + k]);
    ok = (d & 0xC0) == 0x80;
    cp = (cp << 6) | (d & 0x3F);
  }
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  ok = ok && cp >= least[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
  *code_point = ok ? cp : 0xFFFFFFFFu;
  return ok ? n : 1;
}

std::vector<Char> characters(std::string_view t) {
  std::vector<Char> out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    uint32_t cp = 0;
    const size_t n = char_at(t, i, &cp);
    out.push_back({i, n, cp, cp == 0xFFFFFFFFu ? CharClass::other : class_of(cp)});
    i += n;
  }
  return out;
}

}  // namespace bytelevel_detail

using bytelevel_detail::Char;
using bytelevel_detail::char_at;
using bytelevel_detail::CharClass;
using bytelevel_detail::characters;
using bytelevel_detail::class_of;
using bytelevel_detail::pretokenize;

namespace {

uint64_t count_characters(std::string_view t) {
  uint64_t count = 0;
  uint32_t cp = 0;
  for (size_t i = 0; i < t.size(); ++count) i += static_cast<unsigned char>(t[i]) < 0x80 ? 1 : char_at(t, i, &cp);
  return count;
}

// BPE on one piece's bytes: the pair of the lowest rank is merged, at every
// place it occurs from the left, until no adjacent pair has a merge. The
// pieces are a list linked through `next` and `prev` (a merged right part
// drops out: its id is -1), the pairs with a merge a heap by (rank,
// position): all the places of the lowest rank are taken off at once and
// merged from the left, each checked against the list as it is then (a place
// whose pair a merge has changed is passed over), and a merge puts its new
// pairs on the heap.
void merge_piece(const ByteLevelModel& m, std::string_view piece, std::vector<int32_t>& ids) {
  ids.clear();
  if (m.ignore_merges) {
    auto it = m.id_of.find(std::string(piece));
    if (it != m.id_of.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  for (char c : piece) ids.push_back(m.byte_id[static_cast<unsigned char>(c)]);
  const size_t n = ids.size();
  if (n < 2) return;
  constexpr size_t none = SIZE_MAX;
  std::vector<size_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) next[i] = i + 1 < n ? i + 1 : none, prev[i] = i > 0 ? i - 1 : none;
  // The merge of the pair that starts at i: (rank, merged id), or null.
  auto merge_at = [&](size_t i) -> const std::pair<int32_t, int32_t>* {
    if (next[i] == none) return nullptr;
    auto it = m.merges.find(static_cast<uint64_t>(ids[i]) << 32 | static_cast<uint32_t>(ids[next[i]]));
    return it == m.merges.end() ? nullptr : &it->second;
  };
  struct Place {
    int32_t rank;
    size_t at;
  };
  auto later = [](const Place& a, const Place& b) { return a.rank != b.rank ? a.rank > b.rank : a.at > b.at; };
  std::vector<Place> heap;
  auto push = [&](size_t i) {
    if (const auto* g = merge_at(i)) {
      heap.push_back({g->first, i});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<size_t> places;
  while (!heap.empty()) {
    // Every place of the lowest rank, from the left: one pass of the rule
    // above. A merge's new pairs are never of this rank (the merged id is
    // neither of its parts), so none of them belongs to this pass.
    const int32_t rank = heap.front().rank;
    places.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      places.push_back(heap.front().at);
      std::pop_heap(heap.begin(), heap.end(), later);
      heap.pop_back();
    }
    for (size_t i : places) {
      if (ids[i] < 0) continue;
      const auto* g = merge_at(i);
      if (g == nullptr || g->first != rank) continue;
      const size_t j = next[i];
      ids[i] = g->second;
      ids[j] = -1;
      next[i] = next[j];
      if (next[j] != none) prev[next[j]] = i;
      if (prev[i] != none) push(prev[i]);
      push(i);
    }
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

// GPT-2's regex on `text` in parts of about 1 MiB (the characters of a part
// take 24 bytes each), cut where the regex cuts too: after a newline that is
// a whitespace run of its own between two printable ASCII characters ("x\ny":
// '\n' is a piece alone, and y starts the next, with or without the cut).
// Calls piece(bytes) for each piece.
template <class Piece>
void gpt2_pieces(std::string_view text, Piece&& piece) {
  auto printable = [](char c) { return c > 0x20 && c < 0x7F; };
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.size();
    for (size_t p = begin + (size_t{1} << 20); p + 1 < text.size(); ++p)
      if (text[p] == '\n' && printable(text[p - 1]) && printable(text[p + 1])) {
        end = p + 1;
        break;
      }
    const std::string_view part = text.substr(begin, end - begin);
    const std::vector<Char> ch = characters(part);
    pretokenize(ch, [&](size_t b, size_t e) {
      const size_t from = ch[b].at, to = ch[e - 1].at + ch[e - 1].len;
      piece(part.substr(from, to - from));
    });
    begin = end;
  }
}

// The pieces of a Split's or Digits' matches (`tokenizers`'
// SplitDelimiterBehavior), one span [begin, end) of the piece at a time:
// add(begin, end, is_match) in order, then finish(). A piece with an unmerged
// neighbour waits in `pending`.
struct Combiner {
  SplitBehavior behavior;
  const std::function<void(size_t, size_t)>& emit;   // non-empty pieces only
  bool pending = false, prev_match = false;
  size_t pb = 0, pe = 0;
  void flush() {
    if (pending && pe > pb) emit(pb, pe);
    pending = false;
  }
  void hold(size_t b, size_t e) { pending = true, pb = b, pe = e; }
  void add(size_t b, size_t e, bool match) {
    switch (behavior) {
      case SplitBehavior::isolated:
        if (e > b) emit(b, e);
        break;
      case SplitBehavior::removed:
        if (!match && e > b) emit(b, e);
        break;
      case SplitBehavior::merged_with_previous:   // a match joins the piece before it, unless that is a match
        if (match && !prev_match && pending) pe = e;
        else flush(), hold(b, e);
        break;
      case SplitBehavior::contiguous:   // runs of matches, and of the rest, are one piece each
        if (match == prev_match && pending) pe = e;
        else flush(), hold(b, e);
        break;
      case SplitBehavior::merged_with_next:   // a match joins the piece after it, unless that is a match
        if (pending) {
          if (!match) pe = e, flush();
          else flush(), hold(b, e);
        } else if (match) {
          hold(b, e);
        } else if (e > b) {
          emit(b, e);
        }
        break;
    }
    prev_match = match;
  }
};

#if defined(CAPSTEP_HAVE_PCRE2)
struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) throw Error("out of memory for a regex match");
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};
#endif

// Runs the pre-tokenizers from step k on `piece`, then bpe(piece) for each
// piece the last one gives.
void run_steps(const ByteLevelModel& m, size_t k, std::string_view piece,
               const std::function<void(std::string_view)>& bpe) {
  if (piece.empty()) return;
  const PreStep& step = m.pre[k];
  const std::function<void(size_t, size_t)> next = [&](size_t b, size_t e) {
    run_steps(m, k + 1, piece.substr(b, e - b), bpe);
  };
  switch (step.kind) {
    case PreStep::byte_level: {   // the last step: the byte alphabet is the BPE's own
      std::string spaced;
      if (step.add_prefix_space && piece.front() != ' ') {
        spaced = " " + std::string(piece);
        piece = spaced;
      }
      if (step.use_regex) gpt2_pieces(piece, [&](std::string_view p) { bpe(p); });
      else bpe(piece);
      return;
    }
    case PreStep::digits: {   // each digit (\p{N}, Rust's char::is_numeric) a match
      Combiner c{step.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous, next};
      size_t from = 0;
      uint32_t cp = 0;
      for (size_t i = 0; i < piece.size();) {
        const size_t n = char_at(piece, i, &cp);
        if (cp != 0xFFFFFFFFu && class_of(cp) == CharClass::number) {
          if (from < i) c.add(from, i, false);
          c.add(i, i + n, true);
          from = i + n;
        }
        i += n;
      }
      if (from < piece.size()) c.add(from, piece.size(), false);
      c.flush();
      return;
    }
    case PreStep::split: {
#if defined(CAPSTEP_HAVE_PCRE2)
      Combiner c{step.behavior, next};
      MatchData data(step.regex->code);
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t prev = 0, at = 0;
      uint32_t cp = 0;
      while (at < piece.size()) {
        int rc = pcre2_match(step.regex->code, subject, piece.size(), at, 0, data.md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   // a long run for the JIT's stack: the interpreter takes any
          rc = pcre2_match(step.regex->code, subject, piece.size(), at, PCRE2_NO_JIT, data.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof message);
          throw Error("pre-tokenizer Split \"" + step.pattern + "\": PCRE2 failed to match at byte " +
                      std::to_string(at) + ": " + reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
        const size_t b = ov[0], e = ov[1];
        if (e <= b || b < at) {   // an empty match cuts nothing: go on from the next character
          at = std::max(at, b) + char_at(piece, std::max(at, b), &cp);
          continue;
        }
        if (prev < b) c.add(prev, b, step.invert);
        c.add(b, e, !step.invert);
        prev = at = e;
      }
      if (prev < piece.size()) c.add(prev, piece.size(), step.invert);
      c.flush();
#endif
      return;
    }
  }
}

// `text` in NFC: each run of valid UTF-8 normalized, a byte that is not
// part of valid UTF-8 kept as it is.
std::string nfc_of(std::string_view text) {
  std::string out;
  out.reserve(text.size());
#if defined(CAPSTEP_HAVE_UTF8PROC)
  uint32_t cp = 0;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    bool ascii = true;
    while (j < text.size()) {
      const size_t n = char_at(text, j, &cp);
      if (cp == 0xFFFFFFFFu) break;
      ascii = ascii && cp < 0x80;
      j += n;
    }
    if (ascii) {
      out.append(text.substr(i, j - i));
    } else {
      utf8proc_uint8_t* dst = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                              static_cast<utf8proc_ssize_t>(j - i), &dst,
                                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (n < 0) throw Error(std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
      out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
      std::free(dst);
    }
    if (j < text.size()) out += text[j++];   // the invalid byte
    i = j;
  }
#else
  out = text;
#endif
  return out;
}

// Cuts `text` at the added tokens it holds (special ones only when
// `special`): those that are not normalized first, then the normalized ones
// in the rest, each time the leftmost, the longest there, as `tokenizers`'
// AddedVocabulary does. Calls span(text) for the text between them and id(t)
// for each token.
void cut_added(const ByteLevelModel& m, std::string_view text, bool special,
               const std::function<void(std::string_view)>& span, const std::function<void(int32_t)>& id) {
  auto pass = [&](bool normalized, std::string_view t, const std::function<void(std::string_view)>& rest) {
    std::array<std::vector<const AddedTokenSpec*>, 256> first{};
    bool any = false;
    for (const AddedTokenSpec& a : m.added)
      if (a.normalized == normalized && (special || !a.special)) {
        first[static_cast<unsigned char>(a.content[0])].push_back(&a);
        any = true;
      }
    if (!any) return rest(t);
    for (auto& v : first)
      std::stable_sort(v.begin(), v.end(), [](const AddedTokenSpec* a, const AddedTokenSpec* b) {
        return a->content.size() > b->content.size();
      });
    size_t from = 0;
    for (size_t i = 0; i < t.size();) {
      const AddedTokenSpec* hit = nullptr;
      for (const AddedTokenSpec* a : first[static_cast<unsigned char>(t[i])])
        if (t.compare(i, a->content.size(), a->content) == 0) {
          hit = a;
          break;
        }
      if (!hit) {
        ++i;
        continue;
      }
      if (from < i) rest(t.substr(from, i - from));
      id(hit->id);
      i += hit->content.size();
      from = i;
    }
    if (from < t.size()) rest(t.substr(from));
  };
  pass(false, text, [&](std::string_view gap) { pass(true, gap, span); });
}

}  // namespace

void bytelevel_encode(const ByteLevelModel& m, std::string_view text, TokenIds& out, TextStats& s, bool special) {
  s.characters += count_characters(text);
  // Pieces repeat (words): their ids are kept, up to a bound on the cache.
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  std::vector<int32_t> ids;
  std::string key;
  const std::function<void(std::string_view)> bpe = [&](std::string_view piece) {
    if (piece.size() > 64) {
      merge_piece(m, piece, ids);
      for (int32_t id : ids) out.push_back(id);
      return;
    }
    key.assign(piece);
    auto it = cache.find(key);
    if (it == cache.end()) {
      merge_piece(m, piece, ids);
      if (cache.size() >= (size_t{1} << 20)) {
        for (int32_t id : ids) out.push_back(id);
        return;
      }
      it = cache.emplace(key, ids).first;
    }
    for (int32_t id : it->second) out.push_back(id);
  };
  const std::function<void(std::string_view)> span = [&](std::string_view t) {
    if (m.gpt2) return gpt2_pieces(t, bpe);
    if (!m.nfc) return run_steps(m, 0, t, bpe);
    const std::string normal = nfc_of(t);
    run_steps(m, 0, normal, bpe);
  };
  const bool cut = std::any_of(m.added.begin(), m.added.end(), [&](const AddedTokenSpec& a) { return special || !a.special; });
  if (!cut) return span(text);
  cut_added(m, text, special, span, [&](int32_t id) { out.push_back(id); });
}

bool bytelevel_gives_text_back(const ByteLevelModel& m, bool special) {
  for (const PreStep& p : m.pre)
    if ((p.kind == PreStep::split && p.behavior == SplitBehavior::removed) ||
        (p.kind == PreStep::byte_level && p.add_prefix_space))
      return false;
  for (const AddedTokenSpec& a : m.added)
    if ((special || !a.special) && m.bytes[static_cast<size_t>(a.id)] != a.content) return false;
  return true;
}

std::vector<std::string> bytelevel_pieces(const ByteLevelModel& m, std::string_view text) {
  std::vector<std::string> out;
  const std::function<void(std::string_view)> piece = [&](std::string_view p) { out.emplace_back(p); };
  if (m.gpt2) gpt2_pieces(text, piece);
  else if (!m.nfc) run_steps(m, 0, text, piece);
  else run_steps(m, 0, nfc_of(text), piece);
  return out;
}

std::optional<int32_t> bytelevel_token_id(const ByteLevelModel& m, std::string_view text) {
  for (const AddedTokenSpec& a : m.added)
    if (a.content == text) return a.id;
  auto it = m.id_of.find(std::string(text));
  if (it != m.id_of.end()) return it->second;
  return std::nullopt;
}

std::vector<AddedToken> bytelevel_added_tokens(const ByteLevelModel& m) {
  std::vector<AddedToken> out;
  for (const AddedTokenSpec& a : m.added) out.push_back({a.content, a.id, a.special});
  return out;
}

const std::string& bytelevel_piece(const ByteLevelModel& m, int32_t id) { return m.bytes[static_cast<size_t>(id)]; }

std::vector<size_t> bytelevel_pretokenize(std::string_view text) {
  const std::vector<Char> ch = characters(text);
  std::vector<size_t> out;
  pretokenize(ch, [&](size_t b, size_t e) { out.push_back(ch[e - 1].at + ch[e - 1].len - ch[b].at); });
  return out;
}

}  // namespace capstep::data
