import os

path = os.environ.get("ROOTPROOF")
if path:
    try:
        with open(path, "a") as f:  # as the jailed function this lands in its private /tmp: harmless
            f.write(f"{__name__} uid={os.getuid()}\n")
    except OSError:
        pass
