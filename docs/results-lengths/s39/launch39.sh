source /work/main/.venv/bin/activate
R=~/.cache/orl/runs
for v in hint4st-7k-s1:1 hint4st-7k-s2:2; do n=${v%%:*}; OMP_NUM_THREADS=1 nohup orl train --recipe pretrain --preset tiny_base7h \
    --out $R/$n --set tasks=long7xp,prog7xp,long7xph,prog7xph,long7xpf --set mix=12,12,6,6,6 --set ar_steps=7000 \
    --set diffusion_steps=0 --set threads=1 --set eval_max_new_tokens=100 --set model.attn_logn=false \
    --set pos_stretch=0.5 --set pos_stretch_max=2.0 --set keep_every=500 \
    --set seed=${v##*:} > $R/$n.out 2>&1 < /dev/null & done
