# Writes a legacy-format torch.save file (torch < 1.6, or _use_new_zipfile_serialization=False)
# to stdout, without Python: a state dict of `keys` float32 tensors of one element over `storages`
# storages. Key i, "k" then i in `digits` digits (zero-padded, default 1), is a tensor on storage
# i (its key: i in `digits` digits) when i < storages; the later keys reuse tensor i mod storages
# through the pickle memo, as torch.save writes tied weights. torch.load(weights_only=True) reads
# it. Used by tests/test_attacks.sh for checkpoints of many names.
# Usage: LC_ALL=C awk -v keys=N -v storages=S [-v digits=D] -f legacy_pth.awk >file.pth
function u32(n) { return sprintf("%c%c%c%c", n % 256, int(n / 256) % 256, int(n / 65536) % 256, int(n / 16777216) % 256) }
function str(s) { return "X" u32(length(s)) s }  # BINUNICODE
function num(i) { return sprintf("%0*d", digits, i) }
BEGIN {
    if (storages < 1 || keys < storages) { print "legacy_pth.awk: need keys >= storages >= 1" > "/dev/stderr"; exit 1 }
    if (digits < 1) digits = 1
    printf "%c%c%c%c", 128, 2, 138, 10                                # the magic number, LONG1 of 10 bytes
    printf "%c%c%c%c%c%c%c%c%c%c%c", 108, 252, 156, 70, 249, 32, 106, 168, 80, 25, 46
    printf "%c%cM%c%c.", 128, 2, 233, 3                               # protocol version 1001
    printf "%c%c}(%s%cu.", 128, 2, str("little_endian"), 136          # sys_info {little_endian: True}
    printf "%c%c}(", 128, 2                                           # the state dict
    for (i = 0; i < keys; i++) {
        printf "%s", str("k" num(i))
        if (i >= storages) { printf "j%s", u32(i % storages); continue }  # LONG_BINGET
        printf "ctorch._utils\n_rebuild_tensor_v2\n("                 # (storage, 0, (1,), (1,), False, OrderedDict())
        printf "(%sctorch\nFloatStorage\n%s%sK%cNtQ", str("storage"), str(num(i)), str("cpu"), 1
        printf "K%cK%c%cK%c%c%cccollections\nOrderedDict\n)RtRr%s", 0, 1, 133, 1, 133, 137, u32(i)
    }
    printf "u."
    printf "%c%c](", 128, 2                                           # the storage keys
    for (i = 0; i < storages; i++) printf "%s", str(num(i))
    printf "e."
    for (i = 0; i < storages; i++) printf "%c%c%c%c%c%c%c%c%c%c%c%c", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 128, 63
}
