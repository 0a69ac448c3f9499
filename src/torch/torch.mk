# src/torch build fragment (included by Makefile.am)
