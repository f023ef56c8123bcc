// The built-in corpus: templated sentences from small word lists with a little
// grammar, so that a small model learns it within a few hundred steps (spelling
// of ~60 words, articles, agreement, a question followed by its answer) and its
// samples visibly follow it. Paragraphs keep a topic (one name, one animal) so
// that attention over the context pays off.
#include <string>
#include <vector>

#include "capstep/data.h"

namespace capstep::data {
namespace {

struct Words {
  const char* const* w;
  size_t n;
};
#define CAPSTEP_WORDS(name, ...)                              \
  constexpr const char* name##_list[] = {__VA_ARGS__};         \
  constexpr Words name{name##_list, sizeof(name##_list) / sizeof(name##_list[0])};

CAPSTEP_WORDS(kNames, "Tom", "Tim", "Sam", "Pam", "Dan", "Nan")
CAPSTEP_WORDS(kAnimals, "cat", "rat", "bat", "dog", "hog", "frog", "hen", "pig")      // plural: +s
CAPSTEP_WORDS(kAdjectives, "big", "fat", "red", "old", "sad", "tan", "glad", "wet")
CAPSTEP_WORDS(kThings, "hat", "mat", "pot", "pan", "cap", "cup", "bag", "egg")        // plural: +s
CAPSTEP_WORDS(kPlaces, "den", "pen", "shed", "barn", "pond", "sun", "mud", "van")
CAPSTEP_WORDS(kMoves, "sit", "nap", "run", "hop", "dig", "sing", "jump", "swim")      // singular: +s
CAPSTEP_WORDS(kActs, "see", "get", "hug", "pat", "like", "want", "find", "help")      // singular: +s
CAPSTEP_WORDS(kNumbers, "one", "two", "three", "four", "five")
#undef CAPSTEP_WORDS

class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}

  std::string paragraph() {
    // The topic of this paragraph: half of its names and animals are these.
    topic_name_ = pick(kNames);
    topic_animal_ = pick(kAnimals);
    const size_t sentences = 3 + below(4);
    std::string p;
    for (size_t i = 0; i < sentences; ++i) {
      if (i) p += ' ';
      p += sentence();
    }
    return p + '\n';
  }

 private:
  uint64_t next() { return splitmix64(state_); }
  size_t below(size_t n) { return static_cast<size_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  std::string pick(const Words& w) { return w.w[below(w.n)]; }
  std::string name() { return below(2) ? topic_name_ : pick(kNames); }
  std::string animal() { return below(2) ? topic_animal_ : pick(kAnimals); }
  static std::string article(const std::string& next_word) {
    return std::string("aeiou").find(next_word[0]) != std::string::npos ? "an " + next_word : "a " + next_word;
  }
  static std::string capital(std::string s) {
    if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
    return s;
  }
  std::string other_adjective(const std::string& not_this) {
    for (;;) {
      std::string a = pick(kAdjectives);
      if (a != not_this) return a;
    }
  }

  std::string sentence() {
    switch (below(9)) {
      case 0:
        return "The " + pick(kAdjectives) + " " + animal() + " " + pick(kMoves) + "s in the " + pick(kPlaces) + ".";
      case 1: {
        const std::string thing = below(2) ? pick(kAdjectives) + " " + pick(kThings) : pick(kThings);
        return name() + " " + pick(kActs) + "s " + article(thing) + ".";
      }
      case 2:
        return "The " + animal() + "s " + pick(kMoves) + " near the " + pick(kPlaces) + ".";
      case 3: {
        const std::string a = animal();
        return "Where is the " + a + "? The " + a + " is in the " + pick(kPlaces) + ".";
      }
      case 4: {
        const size_t n = below(kNumbers.n);
        return name() + " has " + kNumbers.w[n] + " " + pick(kThings) + (n ? "s." : ".");
      }
      case 5: {
        const std::string a = name();
        std::string b = pick(kNames);
        while (b == a) b = pick(kNames);
        return a + " and " + b + " " + pick(kActs) + " the " + animal() + "s.";
      }
      case 6: {
        const std::string a = animal(), adj = pick(kAdjectives);
        if (below(2)) return "Is the " + a + " " + adj + "? Yes, the " + a + " is " + adj + ".";
        return "Is the " + a + " " + adj + "? No, the " + a + " is " + other_adjective(adj) + ".";
      }
      case 7:
        return name() + " said: \"I " + pick(kActs) + " the " + animal() + ".\"";
      default:
        return capital(pick(kActs)) + " the " + animal() + ", " + name() + "!";
    }
  }

  uint64_t state_;
  std::string topic_name_, topic_animal_;
};

}  // namespace

std::string builtin_corpus(uint64_t seed, size_t size) {
  Generator g(seed);
  std::string text;
  text.reserve(size + 512);
  while (text.size() < size) text += g.paragraph();
  text.resize(size);
  return text;
}

}  // namespace capstep::data
