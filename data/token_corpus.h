// A corpus of GPT-2 token ids for language models: the King James Bible (Debian's bible-kjv)
// split into its 66 books, each book tokenised on its own with tandem's GPT-2 tokenizer
// (data/tokenizer/gpt2_tokenizer.h), a deterministic train/validation split by document, and a
// cache file so that the tokenising (seconds for the whole Bible) happens once per machine.
//
//   const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load();
//   const std::vector<TextDocument> books = split_kjv_books(read_kjv_text());
//   const TokenCorpus corpus = load_or_make_token_corpus(books, tokenizer, 11, default_kjv_cache_path());
//
// Like make_text_corpus (data/text_corpus.h), nothing here is random or depends on the locale:
// every rank of a multi-node run, and every rerun, gets the same ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class Gpt2Tokenizer;

// A named text: a book of the Bible ("Genesis", "1 Samuel", "Song of Solomon"), a file, ...
struct TextDocument {
  std::string name;
  std::string text;
};

// ---- the King James Bible ----------------------------------------------------------------------

// The whole King James Bible as Debian's `bible` prints it (`bible "Gen1:1-Rev22:21" </dev/null`,
// run with COLUMNS unset so that verses wrap at bible's default width whatever the terminal's):
// 4,298,239 bytes of ASCII from bible-kjv 4.38, 1,189 chapters, each a header line
// ("Genesis 1", "1 Samuel 3", "Song of Solomon 2") between blank lines, then its verses
// ("  1 In the beginning ...", wrapped at 79 columns, continuation lines not indented). The text
// starts with the blank line before "Genesis 1" and ends with Revelation 22:21 and a "\n".
// Errors: `bible` not on $PATH (naming `apt-get install bible-kjv bible-kjv-text`), the command
// failing (its exit status; bible's own message is on stderr above it), or output that does
// not start with Genesis 1:1 or does not end with Revelation 22:21 (an incomplete text).
// It forks a shell (popen), ~0.1 s: in an MPI program whose interconnect objects to fork after
// MPI_Init (Open MPI warns over InfiniBand's openib), read the text before initialising MPI.
std::string read_kjv_text();

// The books of a text in bible's format (read_kjv_text), in the order they appear, each named
// by its chapter headers ("1 Samuel" from "1 Samuel 3") and holding exactly the lines of `text`
// from its first chapter header up to the next book's first header (or the end): so a book
// ends with the blank line before the next book ("...a coffin in Egypt.\n\n"), except the last,
// and the books' texts concatenated in order are `text` without the blank lines before the
// first header, byte for byte.
//
// A chapter header is a line "<name> <number>" (the name starts with a non-blank character; the
// number is decimal, 1 to 9999, without leading zeros) with a blank line (or the start of the
// text) before it and a blank line after it; a blank line holds nothing but spaces, tabs and
// '\r', and a '\r' before a line's "\n" is not part of it ("\r\n" text splits as "\n" text does,
// its bytes kept). A book is a run of headers with the same name. Errors name the line (1-based) and what
// is wrong: no chapter header at all, a non-blank line before the first header, a book whose
// chapters are not numbered 1, 2, 3, ..., a book whose name appears again after another book,
// a chapter without a verse, an indented line that is not a verse ("  <number> <text>"), verses
// not numbered 1, 2, 3, ... within a chapter, a non-indented (continuation) line before a
// chapter's first verse.
std::vector<TextDocument> split_kjv_books(const std::string& text);

// ---- token corpus ------------------------------------------------------------------------------

struct TokenCorpus {
  // Each split's documents, in order, each encoded on its own (its ids do not depend on its
  // neighbours) and preceded by end_of_text: GPT-2's separator between documents, so a split
  // starts with end_of_text and holds one per document.
  std::vector<std::int32_t> train, validation;
  // The names of each split's documents, in order.
  std::vector<std::string> train_documents, validation_documents;
  std::int32_t end_of_text = -1;     // tokenizer.end_of_text()
  std::int64_t vocabulary_size = 0;  // tokenizer.vocabulary_size(): every id lies in [0, vocabulary_size)
};

// Document i goes to validation when i % validation_every == validation_every - 1, the rest to
// train (for the Bible's 66 books and validation_every = 11: 1 Kings, Song of Solomon, Micah,
// Acts, 2 Timothy and Revelation). validation_every >= 2 so that train is never empty; validation is
// empty when there are fewer than validation_every documents. There must be a document, and the
// tokenizer must have an "<|endoftext|>" token. A document's text "<|endoftext|>" is encoded as
// the text it is (GPT-2's encoder treats no text as special), never as end_of_text.
TokenCorpus make_token_corpus(const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                              int validation_every);

// make_token_corpus, read from the cache file `cache_path` when it was written for the same
// input, else computed and written there (its folder is made when missing) for the next call.
//
// The cache's key is an FNV-1a 64 digest (core/hash.h) of every document's name and text, in
// order, validation_every, and the tokenizer: its vocabulary size, end_of_text, merge count and
// every token's bytes. (The merges themselves are not visible outside the tokenizer: two
// vocab.bpe files with the same number of merges in another order would share a key.) A cache
// written for another key is replaced. A cache that is not one (another first line), or whose
// header, length or ids are inconsistent (a truncated file, say), is an error naming the path
// and saying to delete it. A cache that cannot be written (a read-only folder, say) is a
// warning on stderr: the tokens are returned all the same, and the next call tokenises again.
//
// The file: a text header of lines
//   tandem-token-corpus 1
//   key <16 hex digits>
//   vocabulary_size <n>
//   end_of_text <id>
//   train_documents <n>
//   validation_documents <n>
//   train_tokens <n>
//   validation_tokens <n>
//   ids int32le
// then the train ids and the validation ids as little-endian int32 (4 bytes each: GPT-2's
// 50,257 ids would fit in 16 bits, but 4 bytes fit every vocabulary; the Bible takes ~4 MB).
//
// Safe when several processes (the ranks of an MPI run, on one machine or sharing a file
// system) call it with the same path at once: each writes its own temporary file beside the
// cache (named after its host, process and a counter), syncs it and renames it over the cache,
// and a rename replaces the file whole, so a reader sees a complete file, old or new, never a
// partial one. All of them tokenise when there is no cache yet; for the Bible that is seconds.
TokenCorpus load_or_make_token_corpus(const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                                      int validation_every, const std::string& cache_path);

// Where a trainer keeps the Bible's tokens: <folder>/kjv-gpt2-tokens.bin, in the folder of
// tandem's other caches (core/cpu/measured_choice.h): $TANDEM_CACHE_DIR when set and non-empty,
// else $XDG_CACHE_HOME/tandem, else $HOME/.cache/tandem, else $TEST_TMPDIR/tandem-cache, else
// $TMPDIR (or /tmp)/tandem-cache-<uid>. Nothing is made or checked here.
std::string default_kjv_cache_path();

}  // namespace tandem
