#!/bin/bash
# What a device call ran on, for its env.txt: date, kernel, OS, GPU and
# driver, torch and torchvision, the CPU and transparent huge pages.
date -u
uname -a
head -2 /etc/os-release
nvidia-smi
python3 -c 'import torch, torchvision; print(torch.__version__, torch.version.cuda, torchvision.__version__, torch.cuda.get_device_name(0))'
lscpu
cat /sys/kernel/mm/transparent_hugepage/enabled
