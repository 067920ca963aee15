#!/usr/bin/env python3
"""Embed a text file as a NUL-terminated C string: embed.py IN OUT SYMBOL."""
import sys

data = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "w") as out:
    out.write("/* generated from %s by core/embed.py */\n" % sys.argv[1].split("/")[-1])
    out.write("const char %s[] = {\n" % sys.argv[3])
    for i in range(0, len(data), 16):
        out.write(",".join(str(b) for b in data[i:i + 16]) + ",\n")
    out.write("0};\n")
