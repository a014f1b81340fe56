/* placeholder */ typedef int ps_placeholder_;
