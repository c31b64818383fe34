"""An image archive both `docker load` and `ctr images import` read, from an OCI archive.

    archive.py OCI_ARCHIVE NAME OUT      OUT: the OCI image layout of OCI_ARCHIVE (one image), its
                                         index naming the image NAME (io.containerd.image.name,
                                         which ctr and Docker's containerd store read), plus
                                         Docker's manifest.json (Config, RepoTags, Layers: paths
                                         of the same blobs), which `docker load` reads
    archive.py --size ARCHIVE            the image's size: its config and layers as stored
    archive.py --config ARCHIVE          the image's config (JSON): user, entrypoint, ports
"""

import io
import json
import sys
import tarfile


def blob_path(descriptor):
    algorithm, digest = descriptor["digest"].split(":", 1)
    return f"blobs/{algorithm}/{digest}"


def read_json(tar, name):
    return json.load(tar.extractfile(name))


def manifest_of(tar):
    index = read_json(tar, "index.json")
    if len(index["manifests"]) != 1:
        raise SystemExit(f"archive.py: expected one image in the archive, found {len(index['manifests'])}")
    descriptor = index["manifests"][0]
    return index, descriptor, read_json(tar, blob_path(descriptor))


def convert(source, name, out):
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    with tarfile.open(source) as tar:
        index, descriptor, manifest = manifest_of(tar)
        descriptor.setdefault("annotations", {}).update(
            {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag})
        docker = [{"Config": blob_path(manifest["config"]), "RepoTags": [name],
                   "Layers": [blob_path(layer) for layer in manifest["layers"]]}]
        with tarfile.open(out, "w") as dest:
            for member in tar.getmembers():
                if member.name in ("index.json", "manifest.json", "repositories"):
                    continue
                dest.addfile(member, tar.extractfile(member) if member.isfile() else None)
            for file, doc in (("index.json", index), ("manifest.json", docker)):
                data = json.dumps(doc, separators=(",", ":")).encode()
                info = tarfile.TarInfo(file)
                info.size, info.mode = len(data), 0o644
                dest.addfile(info, io.BytesIO(data))


def size(archive):
    with tarfile.open(archive) as tar:
        _, _, manifest = manifest_of(tar)
    total = manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
    return f"{total / 1e6:.1f} MB"


def config(archive):
    with tarfile.open(archive) as tar:
        _, _, manifest = manifest_of(tar)
        return read_json(tar, blob_path(manifest["config"]))


def main(args):
    if len(args) == 2 and args[0] == "--size":
        print(size(args[1]))
    elif len(args) == 2 and args[0] == "--config":
        print(json.dumps(config(args[1]), indent=1))
    elif len(args) == 3:
        convert(*args)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
