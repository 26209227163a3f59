#!/usr/bin/env python3
"""Pad a small createrepo_c repository's metadata to the shape of a real Rocky Linux 9 repository.

usage: rpm_md_shape.py DIR SHAPE [--seed N] [--prefix bx-]
       SHAPE: rocky9-baseos | rocky9-appstream

DIR is a repository made by createrepo_c (a few real .rpm files and DIR/repodata/). The script
appends synthetic <package> entries to its primary, filelists and other metadata until the package
count is the real repository's and the decompressed (open-size) and compressed (size) sizes of each
of the three files are within a few per cent of the real ones (the knobs are calibrated on a
sample, then steered while writing), compressed the way the real repository is (gzip, level 6 as
createrepo_c). The real packages' entries are copied byte for byte and stay first.
repodata/repomd.xml is rewritten as createrepo_c writes it: per data type sha256 checksum of the
compressed file, open-checksum, location repodata/<sha256>-<type>.xml.gz, timestamp (the input's,
so no wall clock), size, open-size; the revision is kept. The old metadata files go.
The benchmark leaves out the *_db sqlite files, group (comps), modules and updateinfo: dnf would
apply modular filtering and errata that the synthetic packages do not model (they are dropped from
repomd.xml and deleted; a repomd.xml.asc would no longer match, so it is deleted too: sign again).
Output is a function of the input and --seed only. One summary line per data type goes to stderr.

The synthetic packages are ballast that looks like EL9 packages (source groups with -libs, -devel,
-doc, python3 subpackages, multilib i686 twins, a few update versions, kernel-like packages with
thousands of kABI provides and kernel-devel-like file lists, sonames, pre="1" scriptlet requires,
conflicts/obsoletes/recommends in the proportions measured on CentOS Stream 9). Every synthetic
name, provide and file carries the prefix (default "bx-", "bx_" in python module paths); the script
refuses to run when the prefix occurs in any real name, provide, requirement or file, so no
synthetic package can satisfy, replace or conflict with anything a real package needs: a
`dnf install` of real packages picks the same packages before and after. Synthetic packages
require common system names (libc.so.6(GLIBC_2.34)(64bit), rtld(GNU_HASH), /bin/sh, systemd, ...)
and each other's provides.

Real figures (x86_64) and where each comes from
-----------------------------------------------
[A] GitHub osbuild/osbuild, test/data/testrepos/baseos/repodata/repomd.xml at commit
    25d34e672589c30012b20bb038aedcd2580dced3 (CentOS Stream 9 BaseOS, timestamps 2025-01-13), and
    .../appstream/repodata/repomd.xml (CS9 AppStream, same day; its filelists there is an empty
    stand-in of 126 bytes, so no real AppStream filelists figure).
[B] same file at commit 2156ba9bf1d1355bc27d7281559f22503287fdeb (CS9 BaseOS, revision 1644263915 =
    2022-02-07, one version per package like a point-release tree).
[C] package counts read from the files of [A]/[B] (packages="..." of the primary/filelists root):
    CS9 AppStream 17,649 (primary), CS9 BaseOS 4,572 (filelists), CS9 BaseOS 2022: 1,125.
    Newest entry per name.arch: CS9 AppStream 5,866 names, 2,632 B open and 290 B gzip per package;
    CS9 BaseOS 1,234 names (measured here on those files).
[D] `dnf repoinfo appstream` on Rocky Linux 9.5, 2025-04-15 (Repo-revision 1744593162,
    baseurl .../pub/rocky//9.5/AppStream/x86_64/os/): Repo-pkgs 5,998, available 5,749; the same
    session shows dnf downloading 2.3 MB (BaseOS) and 8.6 MB (AppStream) of metadata, and i686
    packages in both repositories (Box2D.i686 in appstream, ModemManager-glib.i686 in baseos).
    A GitHub notes file found through the code index (index id 17420474633; the index gave no
    repository name or path). Other Rocky 9 dnf logs there show 2.2-2.3 MB and 7.4-8.4 MB (index
    ids 37975004149, 17158251288, 1622512265, 23425909095).
[E] github.com/ustclug/discussions/issues/474 (2024-09-19): Rocky 9 AppStream repodata names
    ...-PRIMARY.xml.gz, -FILELISTS.xml.gz, -GROUPS.xml.gz, -MODULES.yaml.gz: gzip.

 size/open-size in bytes (repomd.xml <size>/<open-size>); all gzip ("gz")
 repository           packages  primary                filelists              other
 CS9 BaseOS 2025 [A]  4,572 [C] 6,561,934/54,716,015   2,177,188/26,026,065   7,676,436/42,034,008
 CS9 AppStream 2025   17,649    3,597,627/51,840,420   not found              5,286,590/50,060,329
 CS9 BaseOS 2022 [B]  1,125 [C] 1,063,488/8,471,009    612,567/5,894,169      532,333/4,123,156
 Rocky 9.5 AppStream  5,998 [D] not found              not found              not found     (gz [E])
 Rocky 9.5 BaseOS     not found not found              not found              not found

Not found, so estimated (these are the rocky9-* targets below):
 * Rocky 9.5 BaseOS packages: 1,262 = 1,234 CS9 BaseOS names [C] x (5,998 / 5,866), the ratio of
   Rocky 9.5 AppStream packages [D] to CS9 AppStream names [C].
 * Rocky sizes = Rocky packages x bytes per package of a one-version-per-package EL9 repository:
   BaseOS primary/filelists/other from [B] (7,530/945, 5,239/545, 3,665/473 B open/gzip);
   AppStream primary from [C] (2,632/290); AppStream other from [A] (2,836/300, all versions);
   AppStream filelists: no EL9 figure found, BaseOS's per-package bytes [B] used (5,239/545).
   Check against [D]: BaseOS primary+filelists = 1.88 MB of the 2.3 MB dnf downloads (the rest:
   comps, updateinfo); AppStream 1.74+3.27 = 5.0 MB of 8.6 MB (the rest: updateinfo, modules,
   comps), so the AppStream filelists may be larger than estimated.
 * Rocky compression: gzip [E], like CS9 [A]; BaseOS assumed the same.
What dnf 4 downloads by default: primary and filelists (checked with dnf 4.14 on a repository
made by this script, over HTTP: makecache fetches those two; other only for a changelog query such
as `repoquery --changelogs`), plus, in the real repositories, comps and updateinfo (BaseOS) and
comps, modules and updateinfo (AppStream): 2.3 MB and 8.6 MB in all for Rocky 9.5 [D].

Arch shares (measured on [B] and [A]): BaseOS x86_64 68%, i686 21%, noarch 11%; AppStream
x86_64 52%, noarch 32%, i686 15%.
"""
import argparse
import bz2
import hashlib
import lzma
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zlib

# Per shape: package count; per data type (size, open-size) targets; compression; arch shares;
# share of source groups with update versions; kernel-like packages (period in the sorted list,
# kABI provides / kernel-devel files each). See the table above for where the targets come from.
SHAPES = {
    "rocky9-baseos": dict(
        packages=1262,
        files={"primary": (1262 * 945, 1262 * 7530), "filelists": (1262 * 545, 1262 * 5239),
               "other": (1262 * 473, 1262 * 3665)},
        comp="gz", i686=0.215, noarch=0.106, updates=0.03,
        kabi_period=150, kabi_syms=6500, kdevel_period=420, kdevel_files=6000),
    "rocky9-appstream": dict(
        packages=5998,
        files={"primary": (5998 * 290, 5998 * 2632), "filelists": (5998 * 545, 5998 * 5239),
               "other": (5998 * 300, 5998 * 2836)},
        comp="gz", i686=0.152, noarch=0.323, updates=0.03,
        kabi_period=1500, kabi_syms=2000, kdevel_period=600, kdevel_files=8000),
}
TYPES = ("primary", "filelists", "other")
ROOT = {"primary": "metadata", "filelists": "filelists", "other": "otherdata"}
EXT = {"gz": ".gz", "xz": ".xz", "bz2": ".bz2"}
H_MAX = 2.0  # entropy knob: 0 = template sentences and common names, 1 = English-like words,
             # 2 = made-up words; verbosity knob: 1 = EL9-like sizes

SYL = ("ba be bi bo bu ca ce co cu da de di do du fa fe fi fo ga ge go gu ha he hi ho ka ke ki ko "
       "ku la le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se si so "
       "su ta te ti to tu va ve vi vo za ze zo bar ber bin bor dan del dor fen fin gar gel gon "
       "kal ken kor lan len lin lor man mel min mor nar nel nor par pel por ran rel rin ron san "
       "sel sin son tan tel tin tor var vel vin xan zel zor ex ix ox ul um ar er ir or qu th sh "
       "ch str pl tr gr").split()
WORDS = ("the a of and to in for is on that by with from as this an be are it or at which can "
         "library tool tools utility utilities package provides support files data server client "
         "daemon service command line interface program programs development header headers "
         "documentation plugin plugins module modules python bindings configuration system "
         "network file format parser implementation framework runtime shared static version based "
         "used using allows fast simple small high performance compatible standard protocol "
         "access management application applications user users kernel device devices driver "
         "drivers graphical text image images audio video language languages source open free "
         "contains includes required needed install installing also other more these such "
         "functions API C C++ Java Perl Python GNOME KDE Qt GTK X11 TLS SSL HTTP XML JSON").split()
TEMPLATES = (
    "This package contains the shared libraries for {n}.",
    "The {n}-devel package contains libraries and header files for developing applications "
    "that use {n}.",
    "This package provides the command line tools for {n}.",
    "This package contains the documentation for {n} in HTML format.",
    "This package contains the Python 3 bindings for {n}.",
    "{n} is a library for reading and writing files in a portable format.",
    "{n} is a small and fast daemon that manages network devices.",
    "The {n} package contains utilities for managing the system configuration.",
    "This package contains common files shared by the {n} packages.",
    "Data files used by {n}.",
    "{n} provides a simple API for applications written in C and C++.",
    "Install this package if you want to develop programs which will use {n}.",
    "This package contains the plugins for {n}.",
    "The {n} service starts at boot and logs to the system journal.",
)
CHLOG = ("- Rebuild for RHEL {r}", "- Resolves: RHEL-{k}", "- Related: RHEL-{k}",
         "- Update to {v} (RHEL-{k})", "- Fix CVE-20{y}-{k} (RHEL-{k})",
         "- Migrate license tag to SPDX", "- Add gating tests", "- Rebase to upstream version {v}",
         "- Backport upstream fix for a crash at startup (RHEL-{k})",
         "- Bump release for mass rebuild", "- Rebuilt for rhbz#{b}", "- Debrand for Rocky Linux")
FILEWORDS = ("README NEWS ChangeLog AUTHORS COPYING LICENSE TODO THANKS INSTALL config util utils "
             "common core main base types errors io net log init test tests data index style "
             "default example examples module plugin helper helpers api client server parser "
             "format output input cache version options settings").split()
EXTS = ("c h py conf xml json txt html png svg so mo 1.gz 3.gz 5.gz 8.gz service sh pl js css ini "
        "cfg rules desktop").split()
LANGS = ("af am ar as ast be bg bn bn_IN bs ca cs cy da de el en_GB eo es et eu fa fi fr ga gl gu "
         "he hi hr hu hy id is it ja ka kk km kn ko ky lt lv mai mk ml mr ms nb ne nl nn or pa pl "
         "pt pt_BR ro ru si sk sl sq sr sr@latin sv ta te th tr uk ur vi zh_CN zh_HK zh_TW").split()
LICENSES = ("MIT", "GPLv2+", "GPLv2", "GPLv3+", "LGPLv2+", "LGPLv2+ and GPLv2+", "BSD",
            "ASL 2.0", "MIT and BSD", "GPL-2.0-or-later", "LGPL-2.1-or-later", "Apache-2.0",
            "BSD-3-Clause", "MPLv2.0", "Public Domain", "GPLv3+ and GFDL")
SYSREQ64 = ("libc.so.6()(64bit)", "libc.so.6(GLIBC_2.34)(64bit)", "libc.so.6(GLIBC_2.2.5)(64bit)",
            "rtld(GNU_HASH)", "libc.so.6(GLIBC_2.3.4)(64bit)", "libc.so.6(GLIBC_2.14)(64bit)",
            "libz.so.1()(64bit)", "libcrypto.so.3()(64bit)", "libssl.so.3()(64bit)",
            "libstdc++.so.6()(64bit)", "libstdc++.so.6(GLIBCXX_3.4)(64bit)",
            "libgcc_s.so.1()(64bit)", "libgcc_s.so.1(GCC_3.0)(64bit)", "libm.so.6()(64bit)",
            "libglib-2.0.so.0()(64bit)", "libsystemd.so.0()(64bit)", "libpcre2-8.so.0()(64bit)")
SYSREQ32 = ("libc.so.6", "libc.so.6(GLIBC_2.34)", "libc.so.6(GLIBC_2.1.3)", "rtld(GNU_HASH)",
            "libc.so.6(GLIBC_2.0)", "libz.so.1", "libcrypto.so.3", "libstdc++.so.6",
            "libgcc_s.so.1", "libm.so.6", "libglib-2.0.so.0")
SYMWORDS = ("pci dev irq get set alloc free init exit skb net netdev buf page mem map unmap lock "
            "unlock spin mutex read write register unregister device driver module param sysfs "
            "kobject class bus dma iomem ioremap clk gpio phy usb scsi blk queue req bio inode "
            "file dentry super fs vfs attr xattr acpi pm runtime wake timer hrtimer work sched "
            "task cpu node numa kmalloc kfree vmalloc copy user to from kernel sock tcp udp ip "
            "ipv6 crypto hash shash aead cipher rcu list hlist rb tree idr ida of fwnode regmap "
            "i2c spi mdio ethtool xdp bpf trace event perf ring seq printk dump stack ops cb "
            "handler state info data ctx priv start stop reset enable disable put add del find "
            "lookup create destroy update flush sync async wait complete notify").split()
KINDS = ("tool", "tool", "tool", "lib", "lib", "lib", "service", "python", "python", "data")
MEN = ("Alice Novak", "Bruno Silva", "Chen Wei", "Dana Kowalski", "Emil Larsen", "Farah Haddad",
       "Gita Rao", "Hugo Martin", "Ines Costa", "Jonas Berg", "Kenji Sato", "Lena Fischer",
       "Marek Dvorak", "Nora Quinn", "Omar Aziz", "Petra Holm", "Release Engineering")
PACKAGER = "Rocky Linux Build System (Peridot) &lt;releng@rockylinux.org&gt;"  # escaped
DAY0 = 19100  # 2022-04-18 in days since the epoch: builds fall in the 3 years after it


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def qa(s):
    return esc(s).replace('"', "&quot;")


def sayf(fmt, *a):
    print(fmt % a, file=sys.stderr)


# ----------------------------------------------------------------------------- reading the input

def read_md(path):
    if path.endswith(".gz"):
        return zlib.decompress(open(path, "rb").read(), 47)
    if path.endswith(".xz"):
        return lzma.decompress(open(path, "rb").read())
    if path.endswith(".bz2"):
        return bz2.decompress(open(path, "rb").read())
    if path.endswith(".zst"):
        if not shutil.which("zstd"):
            sys.exit(f"{path}: zstd metadata needs the zstd tool (or createrepo_c "
                     "--general-compress-type=gz)")
        return subprocess.run(["zstd", "-dcq", path], check=True, stdout=subprocess.PIPE).stdout
    return open(path, "rb").read()


def split_md(data, root):
    """(header through the root tag, the real <package> entries verbatim, the closing tag on)."""
    close = data.rfind(b"</" + root.encode() + b">")
    if close < 0:
        sys.exit(f"no </{root}> in the input metadata")
    m = re.search(rb"<package[\s>]", data)
    start = m.start() if m and m.start() < close else close
    return data[:start], data[start:close], data[close:]


def real_tokens(md):
    """Every name, dependency and file string of the real packages, lower-cased."""
    out = set()
    for m in re.finditer(rb"<name>([^<]*)</name>", md["primary"]):
        out.add(m.group(1))
    for m in re.finditer(rb'<rpm:entry name="([^"]*)"', md["primary"]):
        out.add(m.group(1))
    for m in re.finditer(rb"<file[^>]*>([^<]*)</file>", md["filelists"]):
        out.add(m.group(1))
    for m in re.finditer(rb'<package [^>]*name="([^"]*)"', md["filelists"] + md["other"]):
        out.add(m.group(1))
    return {t.decode("utf-8", "replace").lower() for t in out}


# ----------------------------------------------------------------------------- writing

def compressor(comp):
    if comp == "gz":
        return zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip, mtime 0, level 6: as createrepo_c
    if comp == "xz":
        return lzma.LZMACompressor(lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)
    if comp == "bz2":
        return bz2.BZ2Compressor(9)
    sys.exit(f"unsupported compression {comp}")


class MdWriter:
    """Streams one metadata file: compresses as it goes, hashes both forms, counts bytes.
    With path None it only counts (calibration)."""

    def __init__(self, path, comp):
        self.f = open(path, "wb") if path else None
        self.open_sha, self.comp_sha = hashlib.sha256(), hashlib.sha256()
        self.open_n = self.comp_n = 0
        self.c = compressor(comp)

    def _out(self, b):
        if b:
            self.comp_n += len(b)
            if self.f:
                self.comp_sha.update(b)
                self.f.write(b)

    def write(self, b):
        if self.f:
            self.open_sha.update(b)
        self.open_n += len(b)
        self._out(self.c.compress(b))

    def close(self):
        self._out(self.c.flush())
        if self.f:
            self.f.close()


# ----------------------------------------------------------------------------- the synthetic set

class Plan:
    """The synthetic packages, decided up front (a small tuple each), sorted by name."""

    def __init__(self, n, shape, seed, prefix):
        rng = random.Random(f"plan:{seed}")
        self.prefix = prefix
        self.groups = []  # (base, kind, version, epoch)
        pk = []  # (name, arch, group index, release, subpackage suffix)
        used = set()
        n_i686 = n_noarch = 0
        while len(pk) < n:
            while True:
                base = "".join(rng.choice(SYL) for _ in range(rng.choice((2, 2, 3, 3, 4))))
                if rng.random() < 0.15:
                    base += str(rng.randint(1, 9))
                if base not in used:
                    used.add(base)
                    break
            kind = rng.choice(KINDS)
            want_noarch = n_noarch < shape["noarch"] * (len(pk) + 3)
            if want_noarch and rng.random() < 0.8:
                kind = rng.choice(("python", "data", "doc"))
            elif not want_noarch and kind in ("python", "data"):
                kind = rng.choice(("tool", "lib", "service"))
            ver = ".".join(str(rng.randint(0, x)) for x in (
                (30, 20) if rng.random() < 0.4 else (12, 30, 20)))
            epoch = rng.choice((1, 2)) if rng.random() < 0.05 else 0
            g = len(self.groups)
            self.groups.append((base, kind, ver, epoch))
            subs = {"tool": ["", "-libs", "-devel", "-doc"], "lib": ["-libs", "-devel", ""],
                    "service": ["", "-libs", "-tools"], "python": ["python3-"],
                    "data": ["", "-data"], "doc": ["", "-doc"]}[kind]
            subs = subs[:rng.randint(1, len(subs))]
            if not want_noarch and len(subs) > 1 and "-doc" in subs:
                subs.remove("-doc")
            rels = [f"{rng.randint(1, 12)}.el9"]
            if rng.random() < shape["updates"]:
                for _ in range(1 if shape["updates"] < 0.5 else rng.randint(1, 6)):
                    r = int(rels[-1].split(".")[0])
                    rels.append(f"{r + rng.randint(0, 2)}.el9_{rng.randint(0, 5)}.{len(rels)}")
            for j, rel in enumerate(rels):
                for sub in subs:
                    noarch = kind in ("python", "data", "doc") or sub == "-doc"
                    name = prefix + (sub + base if sub.endswith("-") else base + sub)
                    pk.append((name, "noarch" if noarch else "x86_64", g, rel, sub, j))
                    n_noarch += noarch
                    if (not noarch and sub in ("-libs", "") and kind in ("lib", "tool", "service")
                            and n_i686 < shape["i686"] * len(pk) and rng.random() < 0.9):
                        pk.append((name, "i686", g, rel, sub, j))
                        n_i686 += 1
        del pk[n:]
        pk.sort(key=lambda p: (p[0], p[1], p[5]))
        self.pkgs = pk
        # kernel-like packages: every so many x86_64 names, all their versions
        # (1: kABI provides like kernel-core, 2: a file tree like kernel-devel)
        self.heavy = []
        u, last = -1, None
        for name, arch, *_ in pk:
            if arch == "x86_64" and name != last:
                u, last = u + 1, name
            kp, dp = shape["kabi_period"], shape["kdevel_period"]
            self.heavy.append(0 if arch != "x86_64" else 1 if u % kp == kp // 2 else
                              2 if u % dp == dp // 3 else 0)
        # what others may require: groups with a soname, python groups, package names
        self.libgroups = sorted({g for _, _, g, _, sub, _ in pk
                                 if sub == "-libs" or (self.groups[g][1] == "lib" and sub == "")})
        self.pygroups = sorted({p[2] for p in pk if self.groups[p[2]][1] == "python"})
        self.has_libs = {p[2] for p in pk if p[4] == "-libs"}


def pw(rng, q=0.0):
    """A made-up word; with q above 0.7 some get longer, with a number."""
    w = "".join(rng.choice(SYL) for _ in range(rng.randint(2, 4)))
    if rng.random() < q - 0.7:
        w += rng.choice(SYL) + str(rng.randint(0, 99))
    return w


def words(rng, n, q, vocab=WORDS):
    """n words from vocab, each made up with probability q."""
    return [pw(rng, q) if rng.random() < q else rng.choice(vocab) for _ in range(n)]


def wrap(ws, width=76):
    lines, cur = [], ""
    for w in ws:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return "\n".join(lines)


def text(rng, n, h, name):
    """About n words of prose: template sentences (h 0), English-like words (1), made up (2)."""
    out, count = [], 0
    while count < n:
        if rng.random() < 1 - h:
            sent = rng.choice(TEMPLATES).format(n=name)
        else:
            sent = " ".join(words(rng, rng.randint(6, 16), h - 1)).capitalize() + "."
        out.append(sent)
        count += sent.count(" ") + 1
    return " ".join(out)


def lognorm(rng, mean, sigma=0.9):
    return rng.lognormvariate(math.log(max(mean, 1e-9)) - sigma * sigma / 2, sigma)


def entry(name, flags=None, e="0", v=None, r=None, pre=False):
    s = f'      <rpm:entry name="{qa(name)}"'
    if flags:
        s += f' flags="{flags}" epoch="{e}" ver="{qa(v)}"'
        if r is not None:
            s += f' rel="{qa(r)}"'
    if pre:
        s += ' pre="1"'
    return s + "/>\n"


def fname(rng, h):
    if rng.random() < h / 2:
        return pw(rng, h / 2)
    w = rng.choice(FILEWORDS)
    return w if rng.random() < 0.7 else f"{w}_{rng.choice(FILEWORDS).lower()}"


class Gen:
    """Generates a synthetic package's primary, filelists and other entries.
    Knobs per data type: [verbosity, entropy]."""

    def __init__(self, plan, shape, seed):
        self.plan, self.shape, self.seed = plan, shape, seed
        self.knob = {t: [1.0, 1.0] for t in TYPES}
        self.chlog = {}

    def heavy(self, i, what):
        return self.plan.heavy[i] == (1 if what == "kabi" else 2)

    def is_heavy(self, i):
        return self.plan.heavy[i] != 0

    def files(self, rng, i, name, arch, base, kind, sub, ver, rel):
        vf, hf = self.knob["filelists"]
        p = self.plan.prefix
        own = p + base
        lib = "/usr/lib" if arch == "i686" else "/usr/lib64"
        fl, dirs, ghosts = [], [], []

        def tree(root, n, exts, dshare=0.4):
            if n <= 0:
                return
            ds = [root]
            dirs.append(root)
            for _ in range(int(n * dshare)):
                d = f"{rng.choice(ds)}/{fname(rng, hf)}"
                ds.append(d)
                dirs.append(d)
            for _ in range(n):
                fl.append(f"{rng.choice(ds)}/{fname(rng, hf)}.{rng.choice(exts)}")

        if self.heavy(i, "kdevel"):  # like kernel-devel
            tree(f"/usr/src/kernels/{p}{ver}-{rel}.{arch}", int(self.shape["kdevel_files"]
                                                         * rng.uniform(0.7, 1.3)),
                 ("h", "h", "c", "S", "o"), 0.12)
        elif sub == "-libs" or (kind == "lib" and sub == ""):
            so = f"lib{own}.so.{len(base) % 5 + 1}"
            fl += [f"{lib}/{so}", f"{lib}/{so}.{ver}"]
            tree(f"{lib}/{own}", int(lognorm(rng, 8 * vf, 1.6)), ("so", "so", "conf", "py"))
        elif sub == "-devel":
            tree(f"/usr/include/{own}", 1 + int(lognorm(rng, 30 * vf, 1.4)), ("h",), 0.15)
            fl += [f"{lib}/lib{own}.so", f"{lib}/pkgconfig/{own}.pc"]
            if rng.random() < 0.3:
                tree(f"{lib}/cmake/{own}", 3, ("cmake",), 0)
        elif sub == "-doc" or kind == "doc":
            tree(f"/usr/share/doc/{name}/html", 1 + int(lognorm(rng, 80 * vf, 1.4)),
                 ("html", "html", "png", "css", "js", "txt"))
        elif kind == "python":
            sp = f"/usr/lib/python3.9/site-packages/{p.replace('-', '_')}{base}"
            ds = [sp]
            dirs += [sp, f"{sp}/__pycache__"]
            for _ in range(int(lognorm(rng, 3 * vf, 1.2))):
                d = f"{rng.choice(ds)}/{fname(rng, hf).lower()}"
                ds.append(d)
                dirs += [d, f"{d}/__pycache__"]
            for _ in range(1 + int(lognorm(rng, 10 * vf, 1.3))):
                d = rng.choice(ds)
                m = fname(rng, hf).lower()
                fl += [f"{d}/{m}.py", f"{d}/__pycache__/{m}.cpython-39.pyc",
                       f"{d}/__pycache__/{m}.cpython-39.opt-1.pyc"]
            di = f"{sp}-{ver}-py3.9.egg-info"
            dirs.append(di)
            fl += [f"{di}/{x}" for x in ("PKG-INFO", "SOURCES.txt", "dependency_links.txt",
                                         "requires.txt", "top_level.txt")]
            if rng.random() < 0.3:
                fl.append(f"/usr/bin/{own}")
        else:
            bindir = "/usr/sbin" if kind == "service" else "/usr/bin"
            for k in range(1 + int(lognorm(rng, 1.5 * vf, 1.0))):
                b = f"{bindir}/{own}" + ("" if k == 0 else "-" + fname(rng, hf).lower())
                fl.append(b)
                if rng.random() < 0.6:
                    sec = "8" if kind == "service" else "1"
                    fl.append(f"/usr/share/man/man{sec}/{b.rsplit('/', 1)[1]}.{sec}.gz")
            if rng.random() < 0.45 or kind == "service":
                tree(f"/etc/{own}", 1 + int(lognorm(rng, 2 * vf, 1.0)),
                     ("conf", "conf", "ini", "rules", "xml"), 0.2)
            if kind == "service":
                fl.append(f"/usr/lib/systemd/system/{own}.service")
                dirs += [f"/var/lib/{own}", f"/var/log/{own}"]
                ghosts.append(f"/var/log/{own}/{own}.log")
            if rng.random() < 0.5 or kind == "data":
                tree(f"/usr/share/{own}", int(lognorm(rng, (15 if kind != "data" else 60) * vf,
                                                      1.6)), EXTS)
            dirs.append(f"/usr/share/doc/{name}")
            fl += [f"/usr/share/doc/{name}/{x}" for x in ("README", "NEWS")[:rng.randint(1, 2)]]
            dirs.append(f"/usr/share/licenses/{name}")
            fl.append(f"/usr/share/licenses/{name}/{rng.choice(('COPYING', 'LICENSE'))}")
            if rng.random() < 0.12:
                fl += [f"/usr/share/locale/{ll}/LC_MESSAGES/{own}.mo"
                       for ll in sorted(rng.sample(LANGS, rng.randint(10, len(LANGS))))]
        return sorted(set([(f, "") for f in fl] + [(d, "dir") for d in dirs]
                          + [(g, "ghost") for g in ghosts]))

    def package(self, i):
        name, arch, g, rel, sub, j = self.plan.pkgs[i]
        base, kind, ver, epoch = self.plan.groups[g]
        p = self.plan.prefix
        own = p + base
        # what a package's versions share comes from rng, what a build's subpackages share from
        # brng, the rest (sizes, header range) from vrng
        rng = random.Random(f"{self.seed}:{name}.{arch}")
        brng = random.Random(f"{self.seed}:g{g}:{rel}")
        vrng = random.Random(f"{self.seed}:{i}")
        vp, hp = self.knob["primary"]
        e = str(epoch)
        evr = (e, ver, rel)
        nevra = f"{name}-{ver}-{rel}.{arch}"
        pkgid = hashlib.sha256(f"{self.seed}:{nevra}".encode()).hexdigest()
        m64 = arch == "x86_64"
        b64 = "(64bit)" if m64 else ""
        isa = {"x86_64": "(x86-64)", "i686": "(x86-32)"}.get(arch, "")
        files = self.files(rng, i, name, arch, base, kind, sub, ver, rel)
        # provides
        prov = [entry(name, "EQ", *evr)]
        if isa:
            prov.append(entry(name + isa, "EQ", *evr))
        if any(f.startswith("/etc/") and t == "" for f, t in files):
            prov.insert(0, entry(f"config({name})", "EQ", *evr))
        if sub == "-libs" or (kind == "lib" and sub == ""):
            so = f"lib{own}.so.{len(base) % 5 + 1}"
            prov.append(entry(so + ("()" + b64 if m64 else "")))
            tag = own.upper().replace("-", "_")
            for k in range(int(lognorm(rng, 14 * vp, 1.5))):
                prov.append(entry(f"{so}({tag}_{k // 10}.{k % 10}){b64}"))
        if kind == "python":
            for pv in ("python3.9dist", "python3dist"):
                prov.append(entry(f"{pv}({own})", "EQ", "0", ver))
            prov.append(entry(f"{p}python-{base}", "EQ", *evr))
        if sub == "-devel":
            prov.append(entry(f"pkgconfig({own})", "EQ", "0", ver))
        if self.heavy(i, "kabi"):  # like kernel-core: kABI symbol provides
            for _ in range(int(self.shape["kabi_syms"] * rng.uniform(0.7, 1.3))):
                sym = "_".join(words(rng, rng.randint(1, 4), hp / 4, SYMWORDS))
                prov.append(entry(f"{p}kabi({'__' if rng.random() < 0.15 else ''}{sym})", "EQ",
                                  "0", f"0x{rng.getrandbits(32):08x}"))
        # requires
        req = []
        if arch != "noarch":
            sysreq = SYSREQ64 if m64 else SYSREQ32
            req += [entry(r) for r in sorted(rng.sample(sysreq, rng.randint(2, 8)))]
        if sub not in ("-libs", "-doc") and arch != "noarch" and g in self.plan.has_libs:
            req.append(entry(f"{own}-libs{isa}", "EQ", *evr))
        if sub == "-devel":
            req += [entry("pkgconfig"), entry("/usr/bin/pkg-config")]
        if kind == "python":
            req += [entry("python(abi)", "EQ", "0", "3.9"), entry("python3")]
            for _ in range(int(lognorm(rng, 2 * math.sqrt(vp), 0.8))):
                og = self.plan.groups[rng.choice(self.plan.pygroups)]
                if og[0] != base:
                    req.append(entry(f"python3.9dist({p}{og[0]})", "GE", "0", og[2]))
        if arch != "noarch" and self.plan.libgroups:
            for _ in range(int(lognorm(rng, 3 * math.sqrt(vp), 0.9))):
                og = self.plan.groups[rng.choice(self.plan.libgroups)][0]
                if og != base:
                    req.append(entry(f"lib{p}{og}.so.{len(og) % 5 + 1}"
                                     + ("()" + b64 if m64 else "")))
        if rng.random() < 0.25:
            on, _, og, *_ = self.plan.pkgs[rng.randrange(len(self.plan.pkgs))]
            if self.plan.groups[og][0] != base:
                req.append(entry(on, "GE", str(self.plan.groups[og][3]), self.plan.groups[og][2]))
        if kind == "service" and sub == "":
            req += [entry("/bin/sh", pre=True), entry("systemd", pre=True),
                    entry("shadow-utils", pre=True), entry("systemd")]
        elif rng.random() < 0.1:
            req.append(entry("/bin/sh", pre=rng.random() < 0.7))
        # weak and negative dependencies, in about the proportions of CS9's primary
        con = [entry(f"{own}-compat", "LT", *evr)] if rng.random() < 0.08 else []
        obs = ([entry(f"{own}{x}", "LT", "0", ver, rel)
                for x in rng.sample(("-old", "-legacy", "-common", "-utils"), rng.randint(1, 2))]
               if rng.random() < 0.2 else [])
        rec = [entry(f"{own}-doc")] if rng.random() < 0.07 else []
        sup = ([entry(f"({name} and {p}langpacks-{rng.choice(('en', 'de', 'fr'))})")]
               if rng.random() < 0.03 else [])
        # text
        summ = text(rng, 1, hp, own).split(".")[0][:70]
        if rng.random() < 0.05:
            summ += " & tools"
        desc = wrap(text(rng, max(4, int(lognorm(rng, 35 * vp, 0.8))), hp, own).split())
        if rng.random() < 0.03:
            desc += f"\n<{own}> is a <trademark>"
        btime = (DAY0 + 80 * j + brng.randint(0, 1000)) * 86400 + brng.randint(0, 86399)
        psize = int(lognorm(vrng, 400_000, 1.5)) + 6000
        hstart = vrng.choice((4504, 4504, 4504, 5768, 6236))
        hend = hstart + int(lognorm(vrng, 30000, 1.0))
        grng = random.Random(f"{self.seed}:g{g}")
        url = (f"https://{own}.{grng.choice(('org', 'io', 'net'))}/" if grng.random() < 0.5
               else f"https://github.com/{p}{grng.choice(SYL)}{grng.choice(SYL)}/{own}")
        u = "%032x" % brng.getrandbits(128)
        buildhost = f"pb-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}-b-" + (
            "noarch" if arch == "noarch" else "x86-64")
        out = [
            '<package type="rpm">\n'
            f"  <name>{name}</name>\n"
            f"  <arch>{arch}</arch>\n"
            f'  <version epoch="{e}" ver="{qa(ver)}" rel="{qa(rel)}"/>\n'
            f'  <checksum type="sha256" pkgid="YES">{pkgid}</checksum>\n'
            f"  <summary>{esc(summ)}</summary>\n"
            f"  <description>{esc(desc)}</description>\n"
            f"  <packager>{PACKAGER}</packager>\n"
            f"  <url>{esc(url)}</url>\n"
            f'  <time file="{btime + 86400 * brng.randint(1, 20)}" build="{btime}"/>\n'
            f'  <size package="{psize}" installed="{int(psize * vrng.uniform(1.5, 4.0))}" '
            f'archive="{int(psize * vrng.uniform(1.5, 4.1)) + 1024}"/>\n'
            f'  <location href="Packages/{name[0]}/{qa(nevra)}.rpm"/>\n'
            "  <format>\n"
            f"    <rpm:license>{esc(grng.choice(LICENSES))}</rpm:license>\n"
            "    <rpm:vendor>Rocky Enterprise Software Foundation</rpm:vendor>\n"
            "    <rpm:group>Unspecified</rpm:group>\n"
            f"    <rpm:buildhost>{esc(buildhost)}</rpm:buildhost>\n"
            f"    <rpm:sourcerpm>{own}-{ver}-{rel}.src.rpm</rpm:sourcerpm>\n"
            f'    <rpm:header-range start="{hstart}" end="{hend}"/>\n'
            "    <rpm:provides>\n", *dict.fromkeys(prov), "    </rpm:provides>\n"]
        for tag, lst in (("requires", req), ("conflicts", con), ("obsoletes", obs),
                         ("recommends", rec), ("supplements", sup)):
            if lst:
                out += [f"    <rpm:{tag}>\n", *dict.fromkeys(lst), f"    </rpm:{tag}>\n"]
        for f, t in files:  # createrepo_c lists /etc/*, *bin/* in primary too
            if f.startswith("/etc/") or "bin/" in f:
                out.append(f'    <file type="{t}">{esc(f)}</file>\n' if t else
                           f"    <file>{esc(f)}</file>\n")
        out.append("  </format>\n</package>\n")
        head = (f'<package pkgid="{pkgid}" name="{name}" arch="{arch}">\n'
                f'  <version epoch="{e}" ver="{qa(ver)}" rel="{qa(rel)}"/>\n')
        fl = [head]
        for f, t in files:
            fl.append(f'  <file type="{t}">{esc(f)}</file>\n' if t else
                      f"  <file>{esc(f)}</file>\n")
        fl.append("</package>\n")
        other = head + self.changelog(g, rel, j) + "</package>\n"
        return "".join(out), "".join(fl), other

    def changelog(self, g, rel, j):
        """A build's changelog, shared by its subpackages and arches, oldest entry first: the
        group's history plus an entry per update, so that versions share most of it."""
        key = (g, rel)
        if key in self.chlog:
            return self.chlog[key]
        base, kind, ver, epoch = self.plan.groups[g]
        vo, ho = self.knob["other"]
        r = int(rel.split(".")[0])

        def ent(rng, day, vr):
            who = rng.choice(MEN)
            mail = who.split()[0].lower() + "@" + rng.choice(("redhat.com", "rockylinux.org"))
            lines = []
            for _ in range(max(1, int(lognorm(rng, 1.8, 0.7)))):
                if rng.random() < 1 - ho / 2:
                    lines.append(rng.choice(CHLOG).format(
                        r=f"9.{rng.randint(0, 5)}", k=rng.randint(1000, 79999), v=ver,
                        y=rng.randint(20, 25), b=rng.randint(1900000, 2299999)))
                else:
                    lines.append("- " + " ".join(words(rng, rng.randint(4, 14),
                                                       max(ho - 1, 0))).capitalize())
            return (day, f"{who} <{mail}> - {vr}", "\n".join(lines))

        rng = random.Random(f"{self.seed}:c{g}")
        n = max(1, min(80, int(round(lognorm(rng, 6 * vo, 0.8)))))
        day = DAY0 + rng.randint(0, 900)
        ents = []
        for k in range(n):
            vr = f"{ver}-{r - k}" if k < r else f"{ver.rsplit('.', 1)[0]}.{k}-1"
            ents.append(ent(rng, day, vr))
            day -= rng.randint(7, 240)
        ents.reverse()
        for u in range(1, j + 1):
            urng = random.Random(f"{self.seed}:c{g}:{u}")
            ents.append(ent(urng, ents[-1][0] + urng.randint(20, 120), f"{ver}-{r}.{u}"))
        s = "".join(f'  <changelog author="{qa(a)}" date="{d * 86400 + 43200}">{esc(t)}'
                    "</changelog>\n" for d, a, t in ents)
        if len(self.chlog) > 4096:
            self.chlog.clear()
        self.chlog[key] = s
        return s


# ----------------------------------------------------------------------------- shaping

def run(gen, writers, idx):
    for i in idx:
        for t, s in zip(TYPES, gen.package(i)):
            writers[t].write(s.encode())


def spread(lst, m, block=1):
    """About m items of lst: blocks of consecutive ones (neighbours share text), evenly spaced."""
    if m >= len(lst):
        return list(lst)
    nb = max(m // block, 1)
    out = []
    for j in range(nb):
        s = j * len(lst) // nb
        out += lst[s:s + block]
    return out


def calibrate(gen, shape, n_syn, real_open, real_comp):
    """Knob values that give the target bytes per synthetic package, measured on a sample.

    The kernel-like packages do not scale with the knobs: they are measured apart (up to 12 of
    them). For the others (blocks of neighbours, spread over the sorted list): open bytes per
    package proportional to verbosity, log(compression ratio) linear in entropy, its slope
    measured first. Returns, per data type, (verbosity, entropy, open bytes and ratio per ordinary
    package, open and compressed bytes per kernel-like package, slope)."""
    dbg = os.environ.get("SHAPE_DEBUG")
    heavy = [i for i in range(n_syn) if gen.is_heavy(i)]
    hs = set(heavy)
    normal = [i for i in range(n_syn) if i not in hs]
    nn, nh = len(normal), len(heavy)
    s_norm, s_heavy = spread(normal, 700, 50), spread(heavy, 12)

    def measure(idx, knobs):
        gen.chlog.clear()
        gen.knob = {t: list(knobs[t]) for t in TYPES}
        ws = {t: MdWriter(None, shape["comp"]) for t in TYPES}
        run(gen, ws, idx)
        for w in ws.values():
            w.close()
        return {t: (ws[t].open_n / max(len(idx), 1), ws[t].comp_n / max(len(idx), 1))
                for t in TYPES}

    lo = measure(s_norm, {t: (1.0, 0.4) for t in TYPES})
    hi = measure(s_norm, {t: (1.0, 1.6) for t in TYPES})
    slope = {t: max((math.log(lo[t][0] / lo[t][1]) - math.log(hi[t][0] / hi[t][1])) / 1.2, 0.05)
             for t in TYPES}
    knobs = {t: (1.0, 0.4) for t in TYPES}
    hv = measure(s_heavy, knobs) if heavy else {t: (0.0, 0.0) for t in TYPES}
    cur = lo
    model = {}
    for it in range(8):
        done = True
        new = {}
        for t in TYPES:
            comp, opn = shape["files"][t]
            ton = (opn - real_open[t] - hv[t][0] * nh) / nn  # what each ordinary one should add
            tcn = (comp - real_comp[t] - hv[t][1] * nh) / nn
            v, h = knobs[t]
            on, cn = cur[t]
            model[t] = (v, h, on, on / cn, hv[t][0], hv[t][1], slope[t])
            if dbg:
                sayf("  %-9s v=%.3f h=%.3f: %.0f B/pkg ratio %.2f (want %.0f, %.2f)",
                     t, v, h, on, on / cn, ton, ton / max(tcn, 1))
            if abs(on / ton - 1) > 0.01 or abs((on / cn) / (ton / max(tcn, 1)) - 1) > 0.01:
                done = False
            dh = (math.log(on / cn) - math.log(max(ton, 1) / max(tcn, 1))) / slope[t]
            new[t] = (min(max(v * max(ton, 1) / on, 0.05), 20),
                      min(max(h + max(min(dh, 0.5), -0.5), 0.0), H_MAX))
        if done:
            break
        knobs = new
        cur = measure(s_norm, knobs)
        if heavy:
            hv = measure(s_heavy, knobs)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--seed", type=int, default=20250415)
    ap.add_argument("--prefix", default="bx-")
    a = ap.parse_args()
    t0 = time.monotonic()
    shape = SHAPES[a.shape]
    prefix = a.prefix
    if not re.fullmatch(r"[a-z][a-z0-9]*-", prefix):
        sys.exit("--prefix: lower-case letters and digits, then '-'")
    rd = os.path.join(a.dir, "repodata")
    tree = ET.parse(os.path.join(rd, "repomd.xml"))
    ns = {"r": "http://linux.duke.edu/metadata/repo"}
    root = tree.getroot()
    revision = root.findtext("r:revision", default="0", namespaces=ns)
    old = {}
    for d in root.findall("r:data", ns):
        href = d.find("r:location", ns).get("href")
        old[d.get("type")] = (href, d.findtext("r:timestamp", default=revision, namespaces=ns))
    for t in TYPES:
        if t not in old:
            sys.exit(f"{rd}/repomd.xml has no {t}")
    md = {t: read_md(os.path.join(a.dir, old[t][0])) for t in TYPES}
    tokens = real_tokens(md)
    bad = sorted(x for x in tokens if prefix in x or prefix.replace("-", "_") in x)
    if bad:
        sys.exit(f"the prefix {prefix!r} occurs in the real packages' names, dependencies or files "
                 f"({', '.join(bad[:3])}): already shaped? Otherwise pick another with --prefix")
    parts = {t: split_md(md[t], ROOT[t]) for t in TYPES}
    n_real = len(re.findall(rb"<package[\s>]", parts["primary"][1]))
    for t in ("filelists", "other"):
        if len(re.findall(rb"<package[\s>]", parts[t][1])) != n_real:
            sys.exit(f"{t} and primary disagree on the number of packages")
    n_total = shape["packages"]
    n_syn = n_total - n_real
    if n_syn < 1:
        sys.exit(f"{n_real} real packages: already at or over the {a.shape} count {n_total}")
    heads = {}
    for t in TYPES:
        h, _ = re.subn(rb'packages="\d+"', f'packages="{n_total}"'.encode(), parts[t][0], count=1)
        heads[t] = h
    # bytes of the real part (header, real packages, tail) as they will be written
    real_open, real_comp = {}, {}
    for t in TYPES:
        blob = heads[t] + parts[t][1] + parts[t][2]
        real_open[t] = len(blob)
        real_comp[t] = len(zlib.compress(blob, 6)) + 18 if shape["comp"] == "gz" else len(blob) // 4

    plan = Plan(n_syn, shape, a.seed, prefix)
    gen = Gen(plan, shape, a.seed)
    model = calibrate(gen, shape, n_syn, real_open, real_comp)
    if os.environ.get("SHAPE_DEBUG"):
        for t in TYPES:
            sayf("calibrated %s: verbosity %.3f entropy %.3f -> %.0f B/pkg ratio %.2f; "
                 "kernel-like %.0f/%.0f B; slope %.2f", t, *model[t])
    # write, correcting the knobs for what is left to reach the totals
    ext = EXT[shape["comp"]]
    tmp = {t: os.path.join(rd, f".shape-{t}.xml{ext}") for t in TYPES}
    ws = {t: MdWriter(tmp[t], shape["comp"]) for t in TYPES}
    for t in TYPES:
        ws[t].write(heads[t] + parts[t][1])

    heavy_left = [0] * (n_syn + 1)  # kernel-like packages at or after each index
    for i in range(n_syn - 1, -1, -1):
        heavy_left[i] = heavy_left[i + 1] + gen.is_heavy(i)
    # what the ordinary packages written so far say about the model, starting from the
    # calibration as if 300 packages had confirmed it: open bytes per unit of verbosity, and
    # compressed bytes written over compressed bytes the model predicted
    prior = 300
    seen = {t: [model[t][2] * prior, model[t][0] * prior] for t in TYPES}
    pred = {t: [model[t][2] / model[t][3] * prior, model[t][2] / model[t][3] * prior]
            for t in TYPES}
    start = {t: ws[t].comp_n for t in TYPES}

    def steer(i):
        """Set the knobs so that what is left to write lands on the targets."""
        hl = heavy_left[i]
        nl = n_syn - i - hl
        if nl < 16:
            return
        for t in TYPES:
            comp, opn = shape["files"][t]
            v0, h0, on, rn, ho, hc, slope = model[t]
            need_o = (opn - len(parts[t][2]) - ws[t].open_n - ho * hl) / nl
            need_c = (comp - ws[t].comp_n - hc * hl) / nl
            unit = seen[t][0] / seen[t][1]
            kappa = (prior * on / rn + ws[t].comp_n - start[t]) / (pred[t][0] + pred[t][1]
                                                                  - prior * on / rn)
            v = max(need_o, 1.0) / unit
            h = h0 - math.log(max(need_o, 1.0) / max(need_c, 1.0) * kappa / rn) / slope
            gen.knob[t] = [min(max(v, v0 * 0.3), v0 * 3), min(max(h, 0.0), H_MAX)]
            if os.environ.get("SHAPE_DEBUG") and i % 512 == 0:
                sayf("  at %d %s: need %.0f B/pkg ratio %.2f, unit %.0f kappa %.3f -> v=%.3f "
                     "h=%.3f", i, t, need_o, need_o / max(need_c, 1), unit, kappa, *gen.knob[t])

    gen.chlog.clear()
    gen.knob = {t: list(model[t][:2]) for t in TYPES}
    for i in range(n_syn):
        if i % 8 == 0:
            steer(i)
        heavy = gen.is_heavy(i)
        for t, x in zip(TYPES, gen.package(i)):
            b = x.encode()
            ws[t].write(b)
            v0, h0, on, rn, ho, hc, slope = model[t]
            if heavy:
                pred[t][1] += hc
            else:
                v, h = gen.knob[t]
                seen[t][0] += len(b)
                seen[t][1] += v
                pred[t][1] += len(b) / (rn * math.exp(-slope * (h - h0)))
    for t in TYPES:
        ws[t].write(parts[t][2])
        ws[t].close()

    # move into place, drop the old files and the types the benchmark leaves out
    keep = set()
    newdata = {}
    for t in TYPES:
        w = ws[t]
        href = f"repodata/{w.comp_sha.hexdigest()}-{t}.xml{ext}"
        os.replace(tmp[t], os.path.join(a.dir, href))
        keep.add(os.path.normpath(os.path.join(a.dir, href)))
        newdata[t] = (w, href)
    dropped = []
    for typ, (href, _) in old.items():
        p = os.path.normpath(os.path.join(a.dir, href))
        if p not in keep and os.path.dirname(p) == os.path.normpath(rd) and os.path.exists(p):
            os.remove(p)
        if typ not in TYPES:
            dropped.append(typ)
    asc = os.path.join(rd, "repomd.xml.asc")
    if os.path.exists(asc):
        os.remove(asc)
        sayf("removed %s: repomd.xml changed, sign it again", asc)
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n'
           '<repomd xmlns="http://linux.duke.edu/metadata/repo" '
           'xmlns:rpm="http://linux.duke.edu/metadata/rpm">\n'
           f"  <revision>{esc(revision)}</revision>\n"]
    for t in TYPES:
        w, href = newdata[t]
        out.append(f'  <data type="{t}">\n'
                   f'    <checksum type="sha256">{w.comp_sha.hexdigest()}</checksum>\n'
                   f'    <open-checksum type="sha256">{w.open_sha.hexdigest()}</open-checksum>\n'
                   f'    <location href="{href}"/>\n'
                   f"    <timestamp>{esc(old[t][1])}</timestamp>\n"
                   f"    <size>{w.comp_n}</size>\n"
                   f"    <open-size>{w.open_n}</open-size>\n"
                   "  </data>\n")
    out.append("</repomd>\n")
    with open(os.path.join(rd, "repomd.xml.tmp"), "w") as f:
        f.write("".join(out))
    os.replace(os.path.join(rd, "repomd.xml.tmp"), os.path.join(rd, "repomd.xml"))
    if dropped:
        sayf("left out of repomd.xml: %s", ", ".join(sorted(dropped)))
    for t in TYPES:
        w = newdata[t][0]
        comp, opn = shape["files"][t]
        sayf("%s %-9s packages=%d (%d real) open-size=%d (target %d, %+.1f%%) size=%d "
             "(target %d, %+.1f%%)", a.shape, t, n_total, n_real, w.open_n, opn,
             100 * (w.open_n / opn - 1), w.comp_n, comp, 100 * (w.comp_n / comp - 1))
    sayf("%s: %.1f s", a.shape, time.monotonic() - t0)


if __name__ == "__main__":
    main()
