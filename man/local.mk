# man pages
dist_man_MANS += %D%/hvdrun.1 %D%/hvdctl.1
