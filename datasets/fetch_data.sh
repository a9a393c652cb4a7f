#!/usr/bin/env bash
# `make data`: SQuAD v1.1 dev + train and the bert-base-uncased vocabulary into
# datasets/data/ (git-ignored). Takes them from ../shared/data when present (gunzip,
# sha256 check); otherwise downloads the official files with curl. The download path
# cannot be tested on the project's build machines (no network): it is written from the
# official addresses and checks the dev file's and the vocabulary's sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=datasets/data
SHARED=../shared/data
mkdir -p "$OUT"

DEV_SHA=95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9
TRAIN_RECON_SHA=e4006a5017d9a0e6ded3b8af9a9eb1bd2648c881fb081c48c6bc8f7f92df9c06
VOCAB_SHA=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
SQUAD_URL=https://rajpurkar.github.io/SQuAD-explorer/dataset
VOCAB_URL=https://huggingface.co/bert-base-uncased/resolve/main/vocab.txt

check() { # file expected-sha256
    local got
    got=$(sha256sum "$1" | cut -d' ' -f1)
    if [ "$got" != "$2" ]; then
        echo "make data: $1: sha256 $got, expected $2" >&2
        rm -f "$1"
        exit 1
    fi
    echo "make data: $1 sha256 $got ok"
}

fetch() { # shared-source (gz or plain) url dest sha (empty = record only)
    local src=$1 url=$2 dest=$3 sha=$4
    if [ -f "$dest" ] && { [ -z "$sha" ] || [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sha" ]; }; then
        echo "make data: $dest present"
        return
    fi
    if [ -f "$SHARED/$src" ]; then
        case "$src" in
            *.gz) gunzip -c "$SHARED/$src" > "$dest.tmp" ;;
            *) cat "$SHARED/$src" > "$dest.tmp" ;;
        esac
    else
        echo "make data: $SHARED/$src not found; downloading $url"
        curl -fL --retry 3 -o "$dest.tmp" "$url"
    fi
    mv "$dest.tmp" "$dest"
    if [ -n "$sha" ]; then check "$dest" "$sha"; else echo "make data: $dest sha256 $(sha256sum "$dest" | cut -d' ' -f1)"; fi
}

fetch squad/dev-v1.1.json.gz "$SQUAD_URL/dev-v1.1.json" "$OUT/dev-v1.1.json" "$DEV_SHA"
fetch vocab/bert-base-uncased-vocab.txt "$VOCAB_URL" "$OUT/vocab.txt" "$VOCAB_SHA"
if [ -f "$SHARED/squad/train-v1.1.reconstructed.json.gz" ]; then
    # the reconstructed train file (synthetic ids, estimated answer_start): runs record its sha256
    fetch squad/train-v1.1.reconstructed.json.gz "" "$OUT/train-v1.1.json" "$TRAIN_RECON_SHA"
else
    # the official train file (md5 981b29407e0affa3b1b156f72073b945); its sha256 is recorded, not checked
    fetch squad/none "$SQUAD_URL/train-v1.1.json" "$OUT/train-v1.1.json" ""
fi
