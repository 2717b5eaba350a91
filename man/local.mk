# man pages
dist_man_MANS += %D%/hvdrun.1 %D%/hvdctl.1 %D%/hvd-coordinatord.8 %D%/hvd.conf.5 %D%/libhvd.3
