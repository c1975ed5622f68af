#!/usr/bin/env bash
# Peer checks of tests/references_families.py: build one virtual environment per peer group from scratch
# (their pins conflict: RecTools and RecPack need numpy 1, LensKit pandas 2, the main environment has
# pandas 3), run each group's pytest file there, then print the largest |peer - reference| per check.
#
#   bash tests/peers/run_all.sh                 # venvs under ${PEER_VENVS:-/tmp/ignite_recsys_peer_venvs}
#   PEER_REUSE=1 bash tests/peers/run_all.sh    # keep venvs that already exist
#
# Optional in CI: it needs PyPI (and the CPU torch 2.13.0 wheel that pip finds for LensKit and RecPack);
# it changes nothing outside the venv folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENVS=${PEER_VENVS:-/tmp/ignite_recsys_peer_venvs}
DIFFS=$(mktemp)
export PEER_DIFFS_FILE=$DIFFS
start=$(date +%s)

# name | pip requirements | test files
GROUPS_SPEC=(
  "main|torch==2.13.0 ranx==0.3.21 torchmetrics==1.9.0 pytrec-eval-terrier==0.5.11 ir-measures==0.4.3|test_peer_ranx.py test_peer_trec.py test_peer_torchmetrics.py test_hand_worked.py"
  "rectools|rectools==0.19.0 numpy<2 pandas<3 torch==2.13.0 pytorch-ignite==0.5.5 scipy|test_peer_rectools.py test_peer_rectools_metrics.py"
  "lenskit|torch==2.13.0 lenskit==2025.8.1 pytorch-ignite==0.5.5|test_peer_lenskit.py test_peer_lenskit_metrics.py"
  "recpack|torch==2.13.0 recpack==0.3.6|test_peer_recpack.py"
  "recbole|recbole==1.2.1|test_peer_recbole.py"  # --system-site-packages: the main torch, numpy, ignite
)

status=0
for spec in "${GROUPS_SPEC[@]}"; do
  IFS='|' read -r name reqs files <<<"$spec"
  venv="$VENVS/$name"
  t0=$(date +%s)
  if [[ -z "${PEER_REUSE:-}" || ! -x "$venv/bin/python" ]]; then
    rm -rf "$venv"
    python -m venv $([[ $name == recbole ]] && echo --system-site-packages) "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --quiet $reqs pytest
  fi
  t1=$(date +%s)
  echo "== $name: venv $((t1 - t0)) s; $("$venv/bin/python" -m pip freeze | grep -iE '^(numpy|pandas|scipy|torch|pytorch.ignite|ranx|torchmetrics|pytrec.eval.terrier|ir.measures|rectools|lenskit|recpack|recbole)==' | tr '\n' ' ')"
  args=()
  for f in $files; do args+=("tests/peers/$f"); done
  "$venv/bin/python" -m pytest --noconftest -p no:cacheprovider -c /dev/null --rootdir tests/peers -q \
    -W "ignore:unsafe cast from uint64 to int64" "${args[@]}" \
    || status=1
  echo "== $name: tests $(( $(date +%s) - t1 )) s"
done

python - "$DIFFS" <<'EOF'
import sys
worst = {}
for line in open(sys.argv[1]):
    check, diff, tol = line.rstrip("\n").split("\t")
    n, d, _ = worst.get(check, (0, 0.0, tol))
    worst[check] = (n + 1, max(d, float(diff)), tol)
print(f"\n{'check':70} {'values':>7} {'max |diff|':>11} {'tolerance':>10}")
for check, (n, d, tol) in sorted(worst.items()):
    print(f"{check:70} {n:7d} {d:11.3g} {float(tol):10.0e}")
EOF
rm -f "$DIFFS"
echo "total $(( $(date +%s) - start )) s"
exit $status
